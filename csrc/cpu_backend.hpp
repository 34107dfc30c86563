// ggml's CPU backend: in a build with run-time variants (the default), loads the best variant this machine runs
// from the extension's directory, and reports which one runs.
#pragma once

#include <string>
#include <utility>
#include <vector>

struct ggml_threadpool;
struct ggml_threadpool_params;

namespace mtp {

struct CpuBackendInfo {
    bool runtime_variants = false;  // false: one CPU backend compiled into the extension
    std::string variant;            // the loaded variant's tag ("zen4", "haswell", ...); "static" otherwise
    std::string path;               // the module loaded; "" for a static build
    std::vector<std::string> built;                     // the variants this build ships
    std::vector<std::pair<std::string, int>> scores;    // each shipped variant's score here; 0: not runnable
    std::vector<std::pair<std::string, std::string>> features;  // the backend's own feature list
};

// Loads the backends of a run-time-variant build (GPU modules first, then the CPU variant), before
// llama_backend_init. Fails with a ModelLoad error naming the variants when none can run.
void load_backend_modules();

// What load_backend_modules chose (call after ensure_backend()).
const CpuBackendInfo & cpu_backend_info();

// ggml_threadpool_new of the loaded CPU backend.
ggml_threadpool * new_cpu_threadpool(ggml_threadpool_params * params);

}  // namespace mtp
