//! Decoding of raw CUPTI activity records into owned records, from synthetic records laid out
//! exactly as CUPTI 13.0 writes them (run under valgrind by scripts/memcheck.sh).

use std::ffi::CString;

use cupti_sys as sys;
use gpu_ledger::activity::record::{decode, NameCache, Record};

#[test]
fn a_kernel_record_decodes_every_field_and_names_are_interned() {
    let name = CString::new("vector_add").unwrap();
    let mut k = sys::CUpti_ActivityKernel10 {
        kind: sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
        start: 1_000,
        end: 3_500,
        deviceId: 0,
        contextId: 1,
        streamId: 7,
        gridX: 4096,
        gridY: 1,
        gridZ: 1,
        blockX: 256,
        blockY: 1,
        blockZ: 1,
        registersPerThread: 16,
        staticSharedMemory: 0,
        dynamicSharedMemory: 1024,
        localMemoryPerThread: 8,
        localMemoryTotal_v2: 1 << 20,
        correlationId: 42,
        name: name.as_ptr(),
        graphId: 3,
        graphNodeId: 9,
        ..Default::default()
    };
    let mut names = NameCache::default();
    // SAFETY: `k` is a complete, correctly laid out kernel record whose name outlives the call.
    let rec = unsafe {
        decode(
            (&mut k as *mut sys::CUpti_ActivityKernel10).cast(),
            &mut names,
        )
    };
    let Record::Kernel(r) = rec else {
        panic!("not a kernel: {rec:?}")
    };
    assert_eq!(r.name, "vector_add");
    assert_eq!(
        (r.start, r.end, r.stream_id, r.correlation_id),
        (1_000, 3_500, 7, 42)
    );
    assert_eq!(r.grid, [4096, 1, 1]);
    assert_eq!(r.block, [256, 1, 1]);
    assert_eq!(
        (
            r.registers_per_thread,
            r.dynamic_shared_bytes,
            r.local_bytes_per_thread
        ),
        (16, 1024, 8)
    );
    assert_eq!(
        (r.graph_id, r.graph_node_id, r.local_bytes_total),
        (3, 9, 1 << 20)
    );
    // The same pointer again: the interned name is shared, not copied.
    // SAFETY: as above.
    let again = unsafe {
        decode(
            (&mut k as *mut sys::CUpti_ActivityKernel10).cast(),
            &mut names,
        )
    };
    let Record::Kernel(r2) = again else { panic!() };
    assert!(std::ptr::eq(r.name, r2.name));
}

#[test]
fn copies_memsets_api_and_correlation_records_decode() {
    let mut names = NameCache::default();
    let mut m = sys::CUpti_ActivityMemcpy6 {
        kind: sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY,
        copyKind: 2,
        bytes: 4096,
        start: 10,
        end: 20,
        correlationId: 5,
        ..Default::default()
    };
    // SAFETY: complete memcpy record.
    match unsafe {
        decode(
            (&mut m as *mut sys::CUpti_ActivityMemcpy6).cast(),
            &mut names,
        )
    } {
        Record::Memcpy(c) => {
            assert_eq!((c.direction, c.bytes, c.correlation_id), ("DtoH", 4096, 5))
        }
        other => panic!("{other:?}"),
    }
    let mut s = sys::CUpti_ActivityMemset4 {
        kind: sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMSET,
        bytes: 64,
        correlationId: 6,
        ..Default::default()
    };
    // SAFETY: complete memset record.
    assert!(
        matches!(unsafe { decode((&mut s as *mut sys::CUpti_ActivityMemset4).cast(), &mut names) }, Record::Memset(r) if r.bytes == 64)
    );
    // The timeline enables no API or external-correlation records (its callback captures the
    // calls); one that comes anyway is kept as a kind not decoded, never misread.
    let mut a = sys::CUpti_ActivityAPI {
        kind: sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_DRIVER,
        cbid: 307,
        start: 1,
        end: 2,
        correlationId: 6,
        ..Default::default()
    };
    // SAFETY: complete API record.
    assert_eq!(
        unsafe { decode((&mut a as *mut sys::CUpti_ActivityAPI).cast(), &mut names) },
        Record::Other {
            activity_kind: sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_DRIVER
        }
    );
    let mut other = sys::CUpti_ActivityAPI {
        kind: sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_NVLINK,
        ..Default::default()
    };
    // SAFETY: only the kind is read for kinds gpu-ledger does not decode.
    assert!(matches!(
        unsafe {
            decode(
                (&mut other as *mut sys::CUpti_ActivityAPI).cast(),
                &mut names,
            )
        },
        Record::Other { .. }
    ));
}
