#include "runtime.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>

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
        llama_backend_init();
    }
};

}  // namespace

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

bool has_accelerator() {
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        const auto type = ggml_backend_dev_type(ggml_backend_dev_get(i));
        if (type == GGML_BACKEND_DEVICE_TYPE_GPU || type == GGML_BACKEND_DEVICE_TYPE_IGPU) return true;
    }
    return false;
}

}  // namespace mtp
