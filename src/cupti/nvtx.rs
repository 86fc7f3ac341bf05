//! NVTX calls as CUPTI's NVTX callbacks see them: push, pop and mark, with the message resolved
//! (ASCII, wide or registered string) and the domain filtered, handed to the scope layer's sink.
//!
//! NVTX reaches CUPTI only when `NVTX_INJECTION64_PATH` named the CUPTI library as the library
//! made its first NVTX call (NVTX loads its tool once, then calls through its function table);
//! [`injection`] decides and sets it at start. CUPTI then calls the subscriber's callback on the
//! calling thread, inside the NVTX call, once per call.

use std::borrow::Cow;
use std::ffi::CStr;
use std::os::raw::c_char;
use std::path::Path;

use cupti_sys as sys;
use rustc_hash::FxHashMap;

use crate::nvtx::NvtxImport;

/// The environment variable through which NVTX finds its tool.
pub(crate) const INJECTION_ENV: &str = "NVTX_INJECTION64_PATH";

/// The name the default NVTX domain is filtered by (as Nsight Systems names it).
pub(crate) const DEFAULT_DOMAIN: &str = "default";

/// An NVTX call that the scope layer acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NvtxEvent<'a> {
    /// A push/pop range opened on the calling thread, in `domain` (0: the default domain).
    Push {
        domain: usize,
        message: Cow<'a, str>,
    },
    /// The innermost range of `domain` on the calling thread ended.
    Pop { domain: usize },
    /// An instantaneous mark.
    Mark { message: Cow<'a, str> },
}

/// Where decoded NVTX events go (the scope layer's handler).
pub(crate) type NvtxSink = fn(NvtxEvent<'_>);

/// The callbacks enabled for importing NVTX ranges.
pub(crate) const CALLBACKS: [u32; 13] = {
    use sys::CUpti_nvtx_api_trace_cbid as c;
    [
        c::CUPTI_CBID_NVTX_nvtxRangePushA,
        c::CUPTI_CBID_NVTX_nvtxRangePushW,
        c::CUPTI_CBID_NVTX_nvtxRangePushEx,
        c::CUPTI_CBID_NVTX_nvtxRangePop,
        c::CUPTI_CBID_NVTX_nvtxDomainRangePushEx,
        c::CUPTI_CBID_NVTX_nvtxDomainRangePop,
        c::CUPTI_CBID_NVTX_nvtxMarkA,
        c::CUPTI_CBID_NVTX_nvtxMarkW,
        c::CUPTI_CBID_NVTX_nvtxMarkEx,
        c::CUPTI_CBID_NVTX_nvtxDomainMarkEx,
        c::CUPTI_CBID_NVTX_nvtxDomainCreateA,
        c::CUPTI_CBID_NVTX_nvtxDomainDestroy,
        c::CUPTI_CBID_NVTX_nvtxDomainRegisterStringA,
    ]
};

/// What the importer knows of the process's NVTX domains and registered strings, and which
/// domains it imports.
pub(crate) struct NvtxImporter {
    import: NvtxImport,
    sink: NvtxSink,
    /// Domain handle -> whether its ranges are imported; a handle created before the profiler
    /// started has no name here and is imported only when every domain is.
    domains: parking_lot::Mutex<FxHashMap<usize, bool>>,
    /// Registered string handle -> its text.
    strings: parking_lot::Mutex<FxHashMap<usize, Box<str>>>,
}

impl NvtxImporter {
    pub(crate) fn new(import: NvtxImport, sink: NvtxSink) -> Self {
        NvtxImporter {
            import,
            sink,
            domains: parking_lot::Mutex::new(FxHashMap::default()),
            strings: parking_lot::Mutex::new(FxHashMap::default()),
        }
    }

    /// Whether ranges of the domain with handle `domain` are imported.
    fn imports(&self, domain: usize) -> bool {
        if domain == 0 {
            return self.import.imports(DEFAULT_DOMAIN);
        }
        match self.domains.lock().get(&domain) {
            Some(on) => *on,
            None => self.import.domains.is_empty(),
        }
    }

    /// Handles one NVTX callback.
    ///
    /// # Safety
    /// `data` is what CUPTI passed for callback id `cbid` of the NVTX domain: its
    /// `functionParams` points to that function's parameter struct (`generated_nvtx_meta.h`),
    /// and `functionReturnValue`, when not null, to its return value; strings and attributes
    /// they point to are valid for the call.
    pub(crate) unsafe fn on_callback(&self, cbid: u32, data: &sys::CUpti_NvtxData) {
        use sys::CUpti_nvtx_api_trace_cbid as c;
        let params = data.functionParams;
        if params.is_null() {
            return;
        }
        // SAFETY: per this function's contract, `params` points to the parameter struct of
        // `cbid` and the pointers inside are valid for the call (each arm reads its own struct).
        unsafe {
            match cbid {
                c::CUPTI_CBID_NVTX_nvtxRangePushA => {
                    let p = &*(params as *const sys::nvtxRangePushA_params);
                    self.push(0, ascii(p.message));
                }
                c::CUPTI_CBID_NVTX_nvtxRangePushW => {
                    let p = &*(params as *const sys::nvtxRangePushW_params);
                    self.push(0, Some(wide(p.message)));
                }
                c::CUPTI_CBID_NVTX_nvtxRangePushEx => {
                    let p = &*(params as *const sys::nvtxRangePushEx_params);
                    let message = self.attributes_message(p.eventAttrib);
                    self.push(0, message);
                }
                c::CUPTI_CBID_NVTX_nvtxRangePop => self.pop(0),
                c::CUPTI_CBID_NVTX_nvtxDomainRangePushEx => {
                    let p = &*(params as *const sys::nvtxDomainRangePushEx_params);
                    let message = self.attributes_message(p.core.eventAttrib);
                    self.push(p.domain as usize, message);
                }
                c::CUPTI_CBID_NVTX_nvtxDomainRangePop => {
                    let p = &*(params as *const sys::nvtxDomainRangePop_params);
                    self.pop(p.domain as usize);
                }
                c::CUPTI_CBID_NVTX_nvtxMarkA => {
                    let p = &*(params as *const sys::nvtxMarkA_params);
                    self.mark(ascii(p.message));
                }
                c::CUPTI_CBID_NVTX_nvtxMarkW => {
                    let p = &*(params as *const sys::nvtxMarkW_params);
                    self.mark(Some(wide(p.message)));
                }
                c::CUPTI_CBID_NVTX_nvtxMarkEx => {
                    let p = &*(params as *const sys::nvtxMarkEx_params);
                    let message = self.attributes_message(p.eventAttrib);
                    self.mark(message);
                }
                c::CUPTI_CBID_NVTX_nvtxDomainMarkEx => {
                    let p = &*(params as *const sys::nvtxDomainMarkEx_params);
                    let message = self.attributes_message(p.core.eventAttrib);
                    self.mark(message);
                }
                c::CUPTI_CBID_NVTX_nvtxDomainCreateA => {
                    let p = &*(params as *const sys::nvtxDomainCreateA_params);
                    let handle = returned_handle(data);
                    if let (Some(handle), Some(name)) = (handle, ascii(p.name)) {
                        let on = self.import.imports(&name);
                        self.domains.lock().insert(handle, on);
                    }
                }
                c::CUPTI_CBID_NVTX_nvtxDomainDestroy => {
                    let p = &*(params as *const sys::nvtxDomainDestroy_params);
                    self.domains.lock().remove(&(p.domain as usize));
                }
                c::CUPTI_CBID_NVTX_nvtxDomainRegisterStringA => {
                    let p = &*(params as *const sys::nvtxDomainRegisterStringA_params);
                    if let (Some(handle), Some(text)) = (returned_handle(data), ascii(p.string)) {
                        self.strings.lock().insert(handle, text.into());
                    }
                }
                _ => {}
            }
        }
    }

    fn push(&self, domain: usize, message: Option<Cow<'_, str>>) {
        if self.imports(domain) {
            let message = message.unwrap_or(Cow::Borrowed("(unnamed NVTX range)"));
            (self.sink)(NvtxEvent::Push { domain, message });
        }
    }

    fn pop(&self, domain: usize) {
        if self.imports(domain) {
            (self.sink)(NvtxEvent::Pop { domain });
        }
    }

    /// A mark steps when it is the step marker, in any domain: the marker is the
    /// application's, whichever domains' ranges are imported.
    fn mark(&self, message: Option<Cow<'_, str>>) {
        let Some(marker) = &self.import.step_marker else {
            return;
        };
        if let Some(message) = message.filter(|m| m == marker) {
            (self.sink)(NvtxEvent::Mark { message });
        }
    }

    /// The message of an event's attributes: ASCII, wide, or a registered string's text.
    ///
    /// # Safety
    /// `attributes` is null or points to NVTX event attributes valid for the call.
    unsafe fn attributes_message<'a>(
        &self,
        attributes: *const sys::nvtxEventAttributes_t,
    ) -> Option<Cow<'a, str>> {
        // SAFETY: per the contract; the union member read is the one `messageType` names.
        unsafe {
            let a = attributes.as_ref()?;
            use sys::nvtxMessageType_t as m;
            match a.messageType as u32 {
                m::NVTX_MESSAGE_TYPE_ASCII => ascii(a.message.ascii),
                m::NVTX_MESSAGE_TYPE_UNICODE => Some(wide(a.message.unicode)),
                m::NVTX_MESSAGE_TYPE_REGISTERED => self
                    .strings
                    .lock()
                    .get(&(a.message.registered as usize))
                    .map(|s| Cow::Owned(s.to_string())),
                _ => None,
            }
        }
    }
}

/// The handle an NVTX call returned (a domain or a string handle), when CUPTI passed it.
///
/// # Safety
/// `data.functionReturnValue` is null or points to the call's returned pointer-sized handle.
unsafe fn returned_handle(data: &sys::CUpti_NvtxData) -> Option<usize> {
    let rv = data.functionReturnValue as *const usize;
    // SAFETY: per the contract.
    let handle = unsafe { rv.as_ref() }.copied()?;
    (handle != 0).then_some(handle)
}

/// A NUL-terminated message, UTF-8 where valid (lossy otherwise).
///
/// # Safety
/// `p` is null or points to a NUL-terminated string valid for the call.
unsafe fn ascii<'a>(p: *const c_char) -> Option<Cow<'a, str>> {
    if p.is_null() {
        return None;
    }
    // SAFETY: per the contract.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy())
}

/// A NUL-terminated wide message (`wchar_t`, UTF-32 on Linux), with invalid code points
/// replaced.
///
/// # Safety
/// `p` is null or points to a NUL-terminated `wchar_t` string valid for the call.
unsafe fn wide<'a>(p: *const sys::wchar_t) -> Cow<'a, str> {
    let mut out = String::new();
    if p.is_null() {
        return Cow::Owned(out);
    }
    let mut i = 0;
    loop {
        // SAFETY: per the contract, every unit up to the NUL is readable.
        let unit = unsafe { *p.add(i) };
        if unit == 0 || i >= 4096 {
            break;
        }
        out.push(char::from_u32(unit as u32).unwrap_or(char::REPLACEMENT_CHARACTER));
        i += 1;
    }
    Cow::Owned(out)
}

/// Whether NVTX will reach the CUPTI at `cupti` (importing is possible), given the value of
/// [`INJECTION_ENV`]; when unset, this is the value to set it to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Injection {
    /// Unset: set it to the CUPTI library.
    Set,
    /// Already names this CUPTI library.
    AlreadyCupti,
    /// Names another tool (Nsight Systems or Compute set it to theirs).
    OtherTool(String),
}

/// Decides [`Injection`] from the environment's `value` and the loaded CUPTI's path.
pub(crate) fn injection(value: Option<&std::ffi::OsStr>, cupti: &Path) -> Injection {
    let Some(value) = value.filter(|v| !v.is_empty()) else {
        return Injection::Set;
    };
    let named = Path::new(value);
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    };
    if same(named, cupti) {
        Injection::AlreadyCupti
    } else {
        Injection::OtherTool(value.to_string_lossy().into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::ffi::CString;

    thread_local! {
        static SEEN: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    }

    fn record(event: NvtxEvent<'_>) {
        let text = match event {
            NvtxEvent::Push { domain, message } => format!("push {domain:#x} {message}"),
            NvtxEvent::Pop { domain } => format!("pop {domain:#x}"),
            NvtxEvent::Mark { message } => format!("mark {message}"),
        };
        SEEN.with(|s| s.borrow_mut().push(text));
    }

    fn seen() -> Vec<String> {
        SEEN.with(|s| std::mem::take(&mut *s.borrow_mut()))
    }

    /// Calls the importer as CUPTI would for `cbid` with `params` (and a returned handle).
    fn call<P>(imp: &NvtxImporter, cbid: u32, params: &P, returned: Option<usize>) {
        let rv = returned.unwrap_or(0);
        let data = sys::CUpti_NvtxData {
            functionName: std::ptr::null(),
            functionParams: params as *const P as *const _,
            functionReturnValue: if returned.is_some() {
                &rv as *const usize as *const _
            } else {
                std::ptr::null()
            },
        };
        // SAFETY: params is the struct of cbid, alive for the call, as CUPTI passes it.
        unsafe { imp.on_callback(cbid, &data) };
    }

    fn attributes(kind: u32, message: sys::nvtxMessageValue_t) -> sys::nvtxEventAttributes_t {
        sys::nvtxEventAttributes_t {
            version: 3,
            size: std::mem::size_of::<sys::nvtxEventAttributes_t>() as u16,
            category: 0,
            colorType: 0,
            color: 0,
            payloadType: 0,
            reserved0: 0,
            payload: sys::nvtxEventAttributes_v2_payload_t { ullValue: 0 },
            messageType: kind as i32,
            message,
        }
    }

    use sys::CUpti_nvtx_api_trace_cbid as c;

    #[test]
    fn ranges_of_every_message_kind_reach_the_sink_with_their_text() {
        let imp = NvtxImporter::new(NvtxImport::default(), record);
        let fwd = CString::new("forward").unwrap();
        call(
            &imp,
            c::CUPTI_CBID_NVTX_nvtxRangePushA,
            &sys::nvtxRangePushA_params {
                message: fwd.as_ptr(),
            },
            None,
        );
        let wide: Vec<i32> = "rückwärts".chars().map(|ch| ch as i32).chain([0]).collect();
        call(
            &imp,
            c::CUPTI_CBID_NVTX_nvtxRangePushW,
            &sys::nvtxRangePushW_params {
                message: wide.as_ptr(),
            },
            None,
        );
        // A registered string, then an Ex push that names it.
        let text = CString::new("gemm").unwrap();
        call(
            &imp,
            c::CUPTI_CBID_NVTX_nvtxDomainRegisterStringA,
            &sys::nvtxDomainRegisterStringA_params {
                domain: std::ptr::null_mut(),
                string: text.as_ptr(),
            },
            Some(0x5000),
        );
        let attrs = attributes(
            sys::nvtxMessageType_t::NVTX_MESSAGE_TYPE_REGISTERED,
            sys::nvtxMessageValue_t {
                registered: 0x5000 as sys::nvtxStringHandle_t,
            },
        );
        call(
            &imp,
            c::CUPTI_CBID_NVTX_nvtxRangePushEx,
            &sys::nvtxRangePushEx_params {
                eventAttrib: &attrs,
            },
            None,
        );
        call(
            &imp,
            c::CUPTI_CBID_NVTX_nvtxRangePop,
            &sys::nvtxRangePop_params {
                dummy: std::ptr::null_mut(),
            },
            None,
        );
        assert_eq!(
            seen(),
            [
                "push 0x0 forward",
                "push 0x0 rückwärts",
                "push 0x0 gemm",
                "pop 0x0"
            ]
        );
    }

    #[test]
    fn only_the_named_domains_are_imported_and_a_mark_steps_only_when_it_is_the_marker() {
        let imp = NvtxImporter::new(
            NvtxImport {
                domains: vec!["cuDNN".into()],
                max_depth: 8,
                step_marker: Some("step".into()),
            },
            record,
        );
        for (name, handle) in [("cuDNN", 0x10usize), ("NCCL", 0x20)] {
            let n = CString::new(name).unwrap();
            call(
                &imp,
                c::CUPTI_CBID_NVTX_nvtxDomainCreateA,
                &sys::nvtxDomainCreateA_params { name: n.as_ptr() },
                Some(handle),
            );
        }
        let conv = CString::new("conv").unwrap();
        let attrs = attributes(
            sys::nvtxMessageType_t::NVTX_MESSAGE_TYPE_ASCII,
            sys::nvtxMessageValue_t {
                ascii: conv.as_ptr(),
            },
        );
        for handle in [0x10usize, 0x20, 0x30, 0] {
            call(
                &imp,
                c::CUPTI_CBID_NVTX_nvtxDomainRangePushEx,
                &sys::nvtxDomainRangePushEx_params {
                    domain: handle as sys::nvtxDomainHandle_t,
                    core: sys::nvtxRangePushEx_params {
                        eventAttrib: &attrs,
                    },
                },
                None,
            );
            call(
                &imp,
                c::CUPTI_CBID_NVTX_nvtxDomainRangePop,
                &sys::nvtxDomainRangePop_params {
                    domain: handle as sys::nvtxDomainHandle_t,
                },
                None,
            );
        }
        for m in ["other", "step"] {
            let m = CString::new(m).unwrap();
            call(
                &imp,
                c::CUPTI_CBID_NVTX_nvtxMarkA,
                &sys::nvtxMarkA_params {
                    message: m.as_ptr(),
                },
                None,
            );
        }
        // Only cuDNN's ranges: not NCCL's, not an unknown handle's, not the default domain's;
        // the marker steps from the default domain all the same.
        assert_eq!(seen(), ["push 0x10 conv", "pop 0x10", "mark step"]);
    }

    #[test]
    fn the_injection_variable_is_set_when_unset_and_left_alone_when_it_names_another_tool() {
        let cupti = Path::new("/opt/cuda/lib/libcupti.so.13");
        assert_eq!(injection(None, cupti), Injection::Set);
        assert_eq!(injection(Some("".as_ref()), cupti), Injection::Set);
        assert_eq!(
            injection(Some(cupti.as_os_str()), cupti),
            Injection::AlreadyCupti
        );
        assert_eq!(
            injection(Some("/opt/nsys/libToolsInjection64.so".as_ref()), cupti),
            Injection::OtherTool("/opt/nsys/libToolsInjection64.so".into())
        );
    }
}
