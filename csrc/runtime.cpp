#include "runtime.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#if defined(__linux__)
#include <dirent.h>
#endif

#include "cpu_backend.hpp"
#include "errors.hpp"
#include "ggml-backend.h"
#include "llama.h"
#include "log.h"

namespace mtp {

namespace {

std::mutex g_log_mutex;
std::deque<std::string> g_log_lines;
std::string g_log_partial;
std::atomic<bool> g_log_echo{false};

void log_callback(ggml_log_level level, const char * text, void *) {
    if (g_log_echo.load(std::memory_order_relaxed)) {
        std::fputs(text, stderr);
    }
    if (level == GGML_LOG_LEVEL_DEBUG) {
        return;
    }
    std::lock_guard<std::mutex> lock(g_log_mutex);
    g_log_partial += text;
    size_t pos;
    while ((pos = g_log_partial.find('\n')) != std::string::npos) {
        g_log_lines.push_back(g_log_partial.substr(0, pos));
        g_log_partial.erase(0, pos + 1);
        if (g_log_lines.size() > 8) {
            g_log_lines.pop_front();
        }
    }
}

struct BackendInit {
    BackendInit() {
        llama_log_set(log_callback, nullptr);
        common_log_set_verbosity_thold(std::getenv("MTP_LLM_VERBOSE") ? LOG_LEVEL_INFO : -1);
        g_log_echo.store(std::getenv("MTP_LLM_VERBOSE") != nullptr);
        load_backend_modules();
        llama_backend_init();
    }
};

}  // namespace

namespace {

// Pools not lent out, by thread count, the most recently returned last. They live until
// the process ends: their workers sleep once they have polled for work a while.
std::mutex g_pools_mutex;
std::map<int32_t, std::vector<ggml_threadpool *>> g_free_pools;

ggml_threadpool * take_pool(int32_t n_threads) {
    {
        std::lock_guard<std::mutex> lock(g_pools_mutex);
        auto & free = g_free_pools[n_threads];
        if (!free.empty()) {
            ggml_threadpool * pool = free.back();
            free.pop_back();
            return pool;
        }
    }
    ggml_threadpool_params params = ggml_threadpool_params_default(n_threads);
    ggml_threadpool * pool = new_cpu_threadpool(&params);
    if (!pool) {
        fail(ErrorKind::ModelLoad, "could not start " + std::to_string(n_threads) + " compute threads");
    }
    return pool;
}

void give_pool(int32_t n_threads, ggml_threadpool * pool) {
    std::lock_guard<std::mutex> lock(g_pools_mutex);
    g_free_pools[n_threads].push_back(pool);
}

}  // namespace

ComputeThreads::ComputeThreads(int32_t n_threads, int32_t n_threads_batch)
    : n_threads_(std::max(1, n_threads)), n_threads_batch_(std::max(1, n_threads_batch)) {
    single_ = take_pool(n_threads_);
    if (n_threads_batch_ != n_threads_) {
        try {
            batch_ = take_pool(n_threads_batch_);
        } catch (...) {
            give_pool(n_threads_, single_);
            throw;
        }
    }
}

ComputeThreads::~ComputeThreads() {
    for (llama_context * ctx : attached_) {
        if (ctx) {
            llama_detach_threadpool(ctx);  // a decode without a lease gets a pool of its own, never this one
        }
    }
    give_pool(n_threads_, single_);
    if (batch_) {
        give_pool(n_threads_batch_, batch_);
    }
}

void ComputeThreads::attach(llama_context * ctx) {
    llama_context *& slot = attached_[attached_[0] ? 1 : 0];
    if (slot) {
        fail(ErrorKind::Decode, "internal: a compute-thread lease serves two contexts at most");
    }
    llama_attach_threadpool(ctx, single_, batch_ ? batch_ : single_);
    slot = ctx;
}

void ensure_backend() {
    static BackendInit init;
    (void) init;
}

std::string recent_log() {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    std::string out;
    for (const auto & line : g_log_lines) {
        out += "  " + line + "\n";
    }
    return out;
}

void clear_log() {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    g_log_lines.clear();
    g_log_partial.clear();
}

std::string with_log(const std::string & msg) {
    std::string log = recent_log();
    return log.empty() ? msg : msg + "\nllama.cpp said:\n" + log;
}

int64_t now_us() { return ggml_time_us(); }

int32_t default_threads() {
    const unsigned hc = std::thread::hardware_concurrency();
    return hc == 0 ? 4 : (int32_t) hc;
}

#if defined(__linux__)
namespace {

// This process's threads that are running or ready to run (/proc/self/task/*/stat state R), the
// caller's included; -1 where it cannot be read.
int own_runnable_threads() {
    DIR * dir = opendir("/proc/self/task");
    if (dir == nullptr) {
        return -1;
    }
    int running = 0;
    while (const dirent * entry = readdir(dir)) {
        if (entry->d_name[0] == '.') {
            continue;
        }
        const std::string path = std::string("/proc/self/task/") + entry->d_name + "/stat";
        std::FILE * f = std::fopen(path.c_str(), "r");
        if (f == nullptr) {
            continue;  // the thread ended
        }
        char line[512];
        const bool read = std::fgets(line, sizeof line, f) != nullptr;
        std::fclose(f);
        const char * close = read ? std::strrchr(line, ')') : nullptr;  // the name may hold spaces
        if (close != nullptr && close[1] == ' ' && close[2] == 'R') {
            ++running;
        }
    }
    closedir(dir);
    return running;
}

}  // namespace

int32_t other_runnable_threads(int32_t readings) {
    // The least of a few readings: a thread that runs for a moment is not a busy machine. This
    // process's own threads are left out, the caller's and any others: a BLAS library's workers
    // spin for a while after the application's last product (numpy's OpenBLAS after an embedding),
    // which is no load to plan around; a lasting one shows as slower decodes, which the thread
    // controller notices on its own.
    int least = INT32_MAX;
    for (int32_t reading = 0; reading < std::max(1, readings); ++reading) {
        if (reading > 0) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        std::FILE * f = std::fopen("/proc/stat", "r");
        if (f == nullptr) {
            return 0;
        }
        char line[256];
        int running = 0;
        while (std::fgets(line, sizeof line, f) != nullptr) {
            if (std::sscanf(line, "procs_running %d", &running) == 1) {
                break;
            }
        }
        std::fclose(f);
        const int own = own_runnable_threads();
        least = std::min(least, running - (own < 1 ? 1 : own));
    }
    return std::max(0, least);
}
#else
int32_t other_runnable_threads(int32_t) { return 0; }  // no /proc: other processes' load is not seen
#endif

bool has_accelerator() {
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        const auto type = ggml_backend_dev_type(ggml_backend_dev_get(i));
        if (type == GGML_BACKEND_DEVICE_TYPE_GPU || type == GGML_BACKEND_DEVICE_TYPE_IGPU) return true;
    }
    return false;
}

namespace {

const char * type_name(enum ggml_backend_dev_type type) {
    switch (type) {
        case GGML_BACKEND_DEVICE_TYPE_CPU: return "cpu";
        case GGML_BACKEND_DEVICE_TYPE_GPU: return "gpu";
        case GGML_BACKEND_DEVICE_TYPE_IGPU: return "igpu";
        case GGML_BACKEND_DEVICE_TYPE_ACCEL: return "accel";
        default: return "meta";
    }
}

// What llama.cpp offloads to when a model names no devices (src/llama.cpp): every GPU,
// or the integrated GPUs where there is none; the CPU always holds what is not offloaded.
std::vector<ggml_backend_dev_t> placement_devices() {
    std::vector<ggml_backend_dev_t> cpu, gpus, igpus;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        switch (ggml_backend_dev_type(dev)) {
            case GGML_BACKEND_DEVICE_TYPE_CPU: cpu.push_back(dev); break;
            case GGML_BACKEND_DEVICE_TYPE_GPU: gpus.push_back(dev); break;
            case GGML_BACKEND_DEVICE_TYPE_IGPU: igpus.push_back(dev); break;
            default: break;
        }
    }
    std::vector<ggml_backend_dev_t> out = cpu;
    const auto & offload = gpus.empty() ? igpus : gpus;
    out.insert(out.end(), offload.begin(), offload.end());
    return out;
}

}  // namespace

std::vector<std::string> list_backends() {
    ensure_backend();
    std::vector<std::string> out;
    for (size_t i = 0; i < ggml_backend_reg_count(); ++i) {
        out.emplace_back(ggml_backend_reg_name(ggml_backend_reg_get(i)));
    }
    return out;
}

std::vector<DeviceInfo> list_devices() {
    ensure_backend();
    std::vector<DeviceInfo> out;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        DeviceInfo d;
        d.name = ggml_backend_dev_name(dev);
        d.description = ggml_backend_dev_description(dev);
        d.type = type_name(ggml_backend_dev_type(dev));
        d.backend = ggml_backend_reg_name(ggml_backend_dev_backend_reg(dev));
        size_t free = 0, total = 0;
        ggml_backend_dev_memory(dev, &free, &total);
        d.memory_free = free;
        d.memory_total = total;
        out.push_back(std::move(d));
    }
    return out;
}

ggml_backend_device * placement_device(const std::string & name) {
    ensure_backend();
    std::string known;
    for (ggml_backend_dev_t dev : placement_devices()) {
        if (name == ggml_backend_dev_name(dev)) {
            return dev;
        }
        known += (known.empty() ? "" : ", ") + std::string(ggml_backend_dev_name(dev));
    }
    fail(ErrorKind::InvalidOption, "no device named '" + name + "' to place the MTP head on; the devices there are: " +
                                       known + (has_accelerator() ? "" : " (this build has no GPU backend: see docs/gpu.md)"));
}

std::string buffer_device_name(ggml_backend_buffer_type * buft) {
    ggml_backend_dev_t dev = ggml_backend_buft_get_device(buft);
    if (dev == nullptr || (ggml_backend_buft_is_host(buft) && ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_GPU &&
                           std::string(ggml_backend_buft_name(buft)).find("_Host") != std::string::npos)) {
        return "CPU";
    }
    return ggml_backend_dev_name(dev);
}

void sort_device_names(std::vector<std::string> & names) {
    auto rank = [](const std::string & name) {
        for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
            if (name == ggml_backend_dev_name(ggml_backend_dev_get(i))) return i;
        }
        return ggml_backend_dev_count();
    };
    std::sort(names.begin(), names.end(), [&](const std::string & a, const std::string & b) {
        return rank(a) != rank(b) ? rank(a) < rank(b) : a < b;
    });
    names.erase(std::unique(names.begin(), names.end()), names.end());
}

}  // namespace mtp
