// Process-wide llama.cpp state: backend initialisation, log capture, clocks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

struct ggml_backend_device;
struct ggml_backend_buffer_type;
struct ggml_threadpool;
struct llama_context;

namespace mtp {

// Initialises llama.cpp's backends and installs the log capture (once per process).
void ensure_backend();

// Last llama.cpp log lines, attached to error messages.
std::string recent_log();
void clear_log();
// `msg` followed by the recent llama.cpp log lines, if any.
std::string with_log(const std::string & msg);

int64_t now_us();
int32_t default_threads();
// Threads of other processes ready to run (Linux: /proc/stat's procs_running less this process's
// runnable threads, the least of `readings` readings 1 ms apart; 0 where it cannot be read, as on
// macOS and Windows): a session does not start on, or probe, more threads than the cores they
// leave free.
int32_t other_runnable_threads(int32_t readings = 1);
// A GPU or integrated-GPU backend is registered.
bool has_accelerator();

// ggml's CPU worker threads, lent to contexts for as long as they compute (a session's
// round, a cost probe). ggml is built without OpenMP (CMakeLists.txt), whose thread teams
// belong to the thread that decodes: a session stepped from executor or server threads got
// a team per thread and oversubscribed the cores. These pools belong to nobody: a lease
// takes the most recently returned pool of its size (whose workers may still be polling
// for work, so they start at once), or starts one when all are lent out, i.e. when
// several contexts compute at the same time; its end detaches the contexts and returns it.
class ComputeThreads {
public:
    ComputeThreads(int32_t n_threads, int32_t n_threads_batch);
    ~ComputeThreads();
    ComputeThreads(const ComputeThreads &) = delete;
    ComputeThreads & operator=(const ComputeThreads &) = delete;
    void attach(llama_context * ctx);

private:
    int32_t n_threads_, n_threads_batch_;
    ggml_threadpool * single_ = nullptr;  // one-token decodes
    ggml_threadpool * batch_ = nullptr;   // batches (the same pool where the counts agree)
    llama_context * attached_[2] = {nullptr, nullptr};  // a lease serves at most a context pair
};

// One ggml device as `mtp-llm info` lists it.
struct DeviceInfo {
    std::string name;         // "CPU", "CUDA0", "Vulkan0", "MTL0", "ROCm0", ...
    std::string description;  // e.g. "NVIDIA H200", "llvmpipe (LLVM 15.0.6, 256 bits)"
    std::string type;         // "cpu", "gpu", "igpu", "accel", "meta"
    std::string backend;      // the registering backend: "CPU", "CUDA", "Vulkan", ...
    uint64_t memory_free = 0;
    uint64_t memory_total = 0;
};

std::vector<std::string> list_backends();
std::vector<DeviceInfo> list_devices();

// The device called `name` that a model can place weights on: the CPU, or a GPU that
// llama.cpp offloads to by default; throws Error(InvalidOption) listing those devices.
ggml_backend_device * placement_device(const std::string & name);

// The device whose memory a buffer type is in: "CPU" for host buffers of a GPU backend
// (pinned "CUDA_Host" memory is computed on by the CPU), else the device's name.
std::string buffer_device_name(ggml_backend_buffer_type * buft);

// Sorts device names in ggml's enumeration order and drops duplicates.
void sort_device_names(std::vector<std::string> & names);

// Adds the time from construction to destruction to a microsecond bucket.
class ScopedTimer {
public:
    explicit ScopedTimer(uint64_t & bucket) : bucket_(bucket), start_(now_us()) {}
    ~ScopedTimer() { bucket_ += (uint64_t) (now_us() - start_); }
    ScopedTimer(const ScopedTimer &) = delete;
    ScopedTimer & operator=(const ScopedTimer &) = delete;

private:
    uint64_t & bucket_;
    int64_t start_;
};

}  // namespace mtp
