// Process-wide llama.cpp state: backend initialisation, log capture, clocks.
#pragma once

#include <cstdint>
#include <string>

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
// A GPU or integrated-GPU backend is registered.
bool has_accelerator();

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
