//! `--switch-probe`: what a sampled timeline's switch is made of, on the raw bindings. Each
//! round, alternated: the seven activity kinds enabled and disabled one by one (each timed), the
//! traced functions' callbacks switched one `cuptiEnableCallback` at a time, and the same
//! callbacks switched by two `cuptiEnableDomain` calls; an empty launch and a synchronize between
//! switches, as a step's work would be.

use super::raw::{cupti_ok, register_raw_buffers};
use super::*;

/// The kinds the timeline enables, each with its enable call's name.
use gpu_ledger::internals::TIMELINE_KINDS as KINDS;

/// A callback that does nothing: the probe times the switches, not the calls.
unsafe extern "C" fn ignore_call(
    _userdata: *mut std::os::raw::c_void,
    _domain: sys::CUpti_CallbackDomain::Type,
    _cbid: sys::CUpti_CallbackId,
    _cbdata: *const std::os::raw::c_void,
) {
}

fn ns(t0: Instant) -> f64 {
    t0.elapsed().as_nanos() as f64
}

pub(super) fn switch_probe(gpu: &Gpu, lib: &'static LoadedCupti, args: &Args) -> Result<()> {
    let traced = gpu_ledger::internals::traced_callbacks(lib);
    // Records have somewhere to go, as in a profiled run.
    register_raw_buffers(lib)?;
    let mut sub: sys::CUpti_SubscriberHandle = std::ptr::null_mut();
    // SAFETY: `ignore_call` never unwinds and lives for the process; no userdata.
    cupti_ok(lib, "cuptiSubscribe", unsafe {
        lib.api
            .cuptiSubscribe(&mut sub, Some(ignore_call), std::ptr::null_mut())
    })?;
    let domains = [
        sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API,
        sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API,
    ];
    let one_by_one = |on: bool| -> Result<f64> {
        let t0 = Instant::now();
        for &(runtime, cbid) in &traced {
            let d = domains[usize::from(runtime)];
            // SAFETY: `sub` is subscribed until the end of this function. A release may refuse
            // a function (the profiler reports those); the probe times the attempt either way.
            let _ = unsafe { lib.api.cuptiEnableCallback(u32::from(on), sub, d, cbid) };
        }
        Ok(ns(t0))
    };
    let by_domain = |on: bool| -> Result<f64> {
        let t0 = Instant::now();
        for d in domains {
            // SAFETY: as above.
            cupti_ok(lib, "cuptiEnableDomain", unsafe {
                lib.api.cuptiEnableDomain(u32::from(on), sub, d)
            })?;
        }
        Ok(ns(t0))
    };
    // The launch and synchronize after a switch, timed: what a switch leaves to the next launch.
    let step = |after: &mut Vec<f64>| -> Result<()> {
        let t0 = Instant::now();
        gpu.launch_empty()?;
        gpu.stream.synchronize()?;
        after.push(ns(t0));
        Ok(())
    };
    let rounds = args.rounds.max(5);
    let mut kind_on = vec![Vec::new(); KINDS.len()];
    let mut kind_off = vec![Vec::new(); KINDS.len()];
    let (mut cb_on, mut cb_off, mut dom_on, mut dom_off) = (vec![], vec![], vec![], vec![]);
    let mut after_kind_on = vec![Vec::new(); KINDS.len()];
    let mut after_kind_off = vec![Vec::new(); KINDS.len()];
    let (mut plain, mut after_all_on, mut after_all_off, mut traced) =
        (vec![], vec![], vec![], vec![]);
    let mut scratch = Vec::new();
    for _ in 0..rounds {
        for (i, &(kind, name)) in KINDS.iter().enumerate() {
            let t0 = Instant::now();
            // SAFETY: plain enum argument.
            cupti_ok(lib, name, unsafe { lib.api.cuptiActivityEnable(kind) })?;
            kind_on[i].push(ns(t0));
            step(&mut after_kind_on[i])?;
            let t0 = Instant::now();
            // SAFETY: plain enum argument.
            cupti_ok(lib, name, unsafe { lib.api.cuptiActivityDisable(kind) })?;
            kind_off[i].push(ns(t0));
            step(&mut after_kind_off[i])?;
        }
        // The timeline's whole switch of kinds, and launches with every kind on.
        step(&mut plain)?;
        step(&mut plain)?;
        for &(kind, name) in &KINDS {
            // SAFETY: plain enum argument.
            cupti_ok(lib, name, unsafe { lib.api.cuptiActivityEnable(kind) })?;
        }
        step(&mut after_all_on)?;
        step(&mut traced)?;
        step(&mut traced)?;
        for &(kind, name) in &KINDS {
            // SAFETY: plain enum argument.
            cupti_ok(lib, name, unsafe { lib.api.cuptiActivityDisable(kind) })?;
        }
        step(&mut after_all_off)?;
        step(&mut plain)?;
        cb_on.push(one_by_one(true)?);
        step(&mut scratch)?;
        cb_off.push(one_by_one(false)?);
        step(&mut scratch)?;
        dom_on.push(by_domain(true)?);
        step(&mut scratch)?;
        dom_off.push(by_domain(false)?);
        step(&mut scratch)?;
    }
    // SAFETY: subscribed above, used once.
    cupti_ok(lib, "cuptiUnsubscribe", unsafe {
        lib.api.cuptiUnsubscribe(sub)
    })?;
    // SAFETY: plain flag argument; the raw pool's completion callback takes the buffers back.
    let _ = unsafe {
        lib.api
            .cuptiActivityFlushAll(sys::CUpti_ActivityFlag::CUPTI_ACTIVITY_FLAG_FLUSH_FORCED)
    };
    let med = |v: &mut Vec<f64>| median(v).unwrap_or(f64::NAN) / 1e3;
    println!("switch probe: median µs of {rounds} rounds, each switch between an empty launch and a synchronize");
    let (mut kinds_on, mut kinds_off) = (0.0, 0.0);
    for (i, (_, name)) in KINDS.iter().enumerate() {
        let (a, b) = (med(&mut kind_on[i]), med(&mut kind_off[i]));
        kinds_on += a;
        kinds_off += b;
        let (c, d) = (med(&mut after_kind_on[i]), med(&mut after_kind_off[i]));
        println!(
            "  {name:<38} / disable {a:>8.2} / {b:>8.2}   next launch+sync {c:>8.2} / {d:>8.2}"
        );
    }
    println!("  the seven kinds                         {kinds_on:>8.2} / {kinds_off:>8.2}");
    println!(
        "  launch+sync: untraced {:.2}, first after the seven on {:.2}, traced {:.2}, first after the seven off {:.2}",
        med(&mut plain),
        med(&mut after_all_on),
        med(&mut traced),
        med(&mut after_all_off)
    );
    println!(
        "  {} callbacks one by one (cuptiEnableCallback) {:>8.2} / {:>8.2}",
        traced.len(),
        med(&mut cb_on),
        med(&mut cb_off)
    );
    println!(
        "  the two API domains (cuptiEnableDomain)  {:>8.2} / {:>8.2}",
        med(&mut dom_on),
        med(&mut dom_off)
    );
    Ok(())
}
