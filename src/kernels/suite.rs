//! The bundled kernel suite of book ch. 14 (issue 5).
