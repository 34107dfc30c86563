// Picks how many compute threads a generation round uses, from the decode times it sees.
//
// On a quiet machine all of them are fastest. When other processes compete for the cores
// (a web server, a build, a notebook beside the model), ggml's threads spin-wait for each
// other at every node, and one thread descheduled stalls the rest: on a 2-core machine a
// 2-thread decode beside one busy process ran 7x slower than a 1-thread one. So the
// session keeps a decayed average of the verify decode's time per thread count and batch
// size, tries the other counts in short probes at doubling intervals (and at once when
// most recent decodes are much slower than the count's time at the last probe), and
// switches when another count is clearly faster.
// Outputs do not depend on the count (ggml's CPU ops split rows between threads).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace mtp {

class ThreadController {
public:
    // n_threads: the session's thread count, the first choice; the others tried
    // (`adaptive`) are n - 1, (n + 1) / 2 and 1. Not adaptive: always n_threads.
    // `cores` and `others_running` (threads of other work ready to run at the start): where they
    // would share cores with n_threads, the first choice is the largest count that fits beside them.
    explicit ThreadController(int32_t n_threads, bool adaptive = true, int32_t cores = 0, int32_t others_running = 0);

    // Where the machine's load can be read (threads of other work ready to run): a probe of more
    // threads than those in use is skipped while they would not fit on `cores` beside that work.
    void set_load_reader(std::function<int32_t()> others_running);

    int32_t choose();                        // threads for the next round's decodes
    void observe(int32_t rows, int64_t us);  // that round's verify decode: `rows` rows took `us`
    int32_t current() const { return candidates_[current_]; }  // the count in use outside probes

private:
    static constexpr int32_t kBuckets = 16;  // batch sizes told apart (larger ones share the last)
    struct Times {
        std::array<double, kBuckets> us{};
        std::array<int32_t, kBuckets> n{};
    };
    void end_probe();
    void rebase();

    std::vector<int32_t> candidates_;
    std::vector<Times> times_;
    std::size_t current_ = 0;
    std::size_t trying_ = 0;       // the candidate of the running probe
    std::size_t next_try_ = 1;     // the candidate the next probe tries
    int32_t probe_left_ = 0;  // decodes left in the running probe
    bool probe_on_slowdown_ = false;  // the running probe began because decodes turned slow
    bool try_all_next_ = false;  // fewer threads in use: probes alternate all threads and the others
    int32_t last_threads_ = 0;
    int32_t since_probe_;
    int32_t interval_;
    // The current count's times when a probe last ended (or when first measured): what
    // "usual" means for the slowdown check. The decayed average cannot serve: it follows a
    // slowdown within a few decodes, before enough of them were seen to call it one.
    std::array<double, kBuckets> reference_{};
    uint32_t slow_history_ = 0;  // bit i: the i-th latest decode of the current count was slow
    int32_t cores_ = 0;  // 0: not given
    std::function<int32_t()> others_running_;
};

}  // namespace mtp
