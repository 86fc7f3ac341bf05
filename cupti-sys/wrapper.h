/* Headers bound by cupti-sys. Fixes to the generated bindings go here or in the generator,
 * never into src/bindings.rs. */
#include <cupti.h>
#include <cupti_range_profiler.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_pmsampling.h>
#include <cupti_pcsampling.h>
#include <cupti_target.h>
/* The parameters CUPTI's NVTX callbacks pass (needs the nvtx3 headers of nvidia-nvtx). */
#include <generated_nvtx_meta.h>
