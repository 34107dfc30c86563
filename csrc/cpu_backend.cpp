#include "cpu_backend.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "errors.hpp"
#include "ggml-backend.h"

#ifdef GGML_BACKEND_DL
#include <dirent.h>
#include <dlfcn.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif

namespace mtp {

namespace {

CpuBackendInfo g_info;

using threadpool_new_fn = ggml_threadpool * (*)(ggml_threadpool_params *);
threadpool_new_fn g_threadpool_new = nullptr;

ggml_backend_reg_t cpu_reg() {
    ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    return dev ? ggml_backend_dev_backend_reg(dev) : nullptr;
}

void read_features(ggml_backend_reg_t reg) {
    auto get = reinterpret_cast<ggml_backend_get_features_t>(
        ggml_backend_reg_get_proc_address(reg, "ggml_backend_get_features"));
    if (!get) {
        return;
    }
    for (ggml_backend_feature * f = get(reg); f && f->name; ++f) {
        g_info.features.emplace_back(f->name, f->value ? f->value : "");
    }
}

#ifdef GGML_BACKEND_DL

std::vector<std::string> split_variants(const std::string & list) {
    std::vector<std::string> out;
    size_t start = 0;
    while (start <= list.size()) {
        size_t end = list.find(',', start);
        if (end == std::string::npos) {
            end = list.size();
        }
        if (end > start) {
            out.push_back(list.substr(start, end - start));
        }
        start = end + 1;
    }
    return out;
}

std::string module_dir() {
    if (const char * env = std::getenv("MTP_LLM_BACKEND_DIR")) {
        return env;
    }
    Dl_info info{};
    if (dladdr(reinterpret_cast<void *>(&load_backend_modules), &info) == 0 || !info.dli_fname) {
        fail(ErrorKind::ModelLoad, "cannot find the directory of the mtp_llm extension to load ggml's backends from; "
                                   "set MTP_LLM_BACKEND_DIR to the folder that holds libggml-cpu-*.so");
    }
    std::string path = info.dli_fname;
    size_t slash = path.rfind('/');
    return slash == std::string::npos ? "." : path.substr(0, slash);
}

// ggml scores a variant by cpuid alone; an instruction set the OS has not enabled (its register state not saved
// on context switches) would still fault. XCR0 says which states the OS saves.
bool os_saves_registers_of(const std::string & tag) {
#if defined(__x86_64__)
    static const std::vector<std::string> kAvx512 = {"skylakex", "cannonlake", "cascadelake", "icelake",
                                                     "cooperlake", "zen4", "sapphirerapids"};
    static const std::vector<std::string> kSseOnly = {"x64", "sse42"};
    if (std::find(kSseOnly.begin(), kSseOnly.end(), tag) != kSseOnly.end()) {
        return true;
    }
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) {  // OSXSAVE
        return false;
    }
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    const unsigned long long xcr0 = (static_cast<unsigned long long>(hi) << 32) | lo;
    if ((xcr0 & 0x6) != 0x6) {  // SSE and AVX state
        return false;
    }
    if (std::find(kAvx512.begin(), kAvx512.end(), tag) != kAvx512.end() && (xcr0 & 0xe0) != 0xe0) {
        return false;  // opmask and ZMM state
    }
    if (tag == "sapphirerapids") {
        constexpr int kArchReqXcompPerm = 0x1023;
        constexpr int kXfeatureXtiledata = 18;
        if ((xcr0 & (3ull << 17)) != (3ull << 17) || syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
            return false;  // AMX tile state not enabled, or this process may not use it
        }
    }
#else
    (void) tag;
#endif
    return true;
}

int score_of(const std::string & path) {
    void * handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        return -1;
    }
    auto score = reinterpret_cast<int (*)()>(dlsym(handle, "ggml_backend_score"));
    const int value = score ? score() : -1;
    dlclose(handle);
    return value;
}

void load_gpu_modules(const std::string & dir) {
    DIR * d = opendir(dir.c_str());
    if (!d) {
        return;
    }
    std::vector<std::string> names;
    while (dirent * entry = readdir(d)) {
        std::string name = entry->d_name;
        if (name.rfind("libggml-", 0) == 0 && name.rfind("libggml-cpu", 0) != 0 && name.size() > 3 &&
            name.compare(name.size() - 3, 3, ".so") == 0) {
            names.push_back(name);
        }
    }
    closedir(d);
    std::sort(names.begin(), names.end());
    for (const std::string & name : names) {
        ggml_backend_load((dir + "/" + name).c_str());  // a GPU backend without its driver logs and is skipped
    }
}

#endif  // GGML_BACKEND_DL

}  // namespace

void load_backend_modules() {
    g_info = CpuBackendInfo{};
#ifdef GGML_BACKEND_DL
    g_info.runtime_variants = true;
    g_info.built = split_variants(MTP_LLM_CPU_VARIANTS);
    const std::string dir = module_dir();
    load_gpu_modules(dir);

    const char * forced = std::getenv("MTP_LLM_CPU_VARIANT");
    std::string best;
    int best_score = 0;
    std::string listing;
    for (const std::string & tag : g_info.built) {
        const std::string path = dir + "/libggml-cpu-" + tag + ".so";
        int score = score_of(path);
        if (score > 0 && !os_saves_registers_of(tag)) {
            score = 0;
        }
        g_info.scores.emplace_back(tag, std::max(score, 0));
        listing += (listing.empty() ? "" : ", ") + tag + (score > 0 ? "" : score < 0 ? " (missing)" : " (not runnable here)");
        if (forced ? tag == forced : score > best_score) {
            best = tag;
            best_score = score;
        }
    }
    if (forced && (best.empty() || best_score <= 0)) {
        fail(ErrorKind::ModelLoad, std::string("MTP_LLM_CPU_VARIANT=") + forced +
                                       " is not a CPU variant this machine can run; the variants in " + dir + ": " +
                                       listing + ". Unset it to load the best one.");
    }
    if (best.empty()) {
        fail(ErrorKind::ModelLoad, "no CPU variant of ggml in " + dir + " runs on this machine (" + listing +
                                       "); reinstall mtp-llm, or build it from source for this CPU");
    }
    g_info.variant = best;
    g_info.path = dir + "/libggml-cpu-" + best + ".so";
    ggml_backend_reg_t reg = ggml_backend_load(g_info.path.c_str());
    if (!reg) {
        fail(ErrorKind::ModelLoad, "could not load ggml's CPU backend " + g_info.path + " (" + listing + ")");
    }
#else
    g_info.variant = "static";
#endif
    ggml_backend_reg_t reg_cpu = cpu_reg();
    if (!reg_cpu) {
        fail(ErrorKind::ModelLoad, "ggml has no CPU backend registered");
    }
    read_features(reg_cpu);
    g_threadpool_new = reinterpret_cast<threadpool_new_fn>(
        ggml_backend_reg_get_proc_address(reg_cpu, "ggml_threadpool_new"));
    if (!g_threadpool_new) {
        fail(ErrorKind::ModelLoad, "ggml's CPU backend does not export ggml_threadpool_new");
    }
}

const CpuBackendInfo & cpu_backend_info() {
    return g_info;
}

ggml_threadpool * new_cpu_threadpool(ggml_threadpool_params * params) {
    return g_threadpool_new(params);
}

}  // namespace mtp
