#include "thread_controller.hpp"

#include <algorithm>
#include <bitset>

namespace mtp {

namespace {

constexpr int32_t kProbeDecodes = 3;     // decodes per probe; the first after a switch is not timed
constexpr int32_t kProbeDecodesOnSlowdown = 5;  // times under a new load are noisy: more of them
constexpr int32_t kProbeMin = 32;        // decodes between probes at first and after a switch
constexpr int32_t kProbeMax = 2048;      // longest interval between probes...
constexpr int32_t kProbeMaxReduced = 512; // ...and while fewer threads run (all of them may pay again soon)
constexpr double kWeight = 0.25;         // weight of a new time in the decayed average
constexpr double kOutlier = 8.0;         // a time above this multiple of the average counts as this multiple
constexpr double kSlow = 1.5;            // a decode this much slower than the reference...
constexpr int32_t kSlowWindow = 8;       // ...in this many of the latest decodes...
constexpr int32_t kSlowCount = 6;        // ...at least this many times: probe now (the load changed)
constexpr int32_t kReferenceAfter = 4;   // steady decodes before a count's first reference
constexpr double kBetter = 0.9;          // another count must be this much faster to take over
constexpr double kGiveUp = 1.5;          // a probe decode this much slower than the current count's ends the probe
constexpr int32_t kFirstProbe = 4;       // decodes before the first probe (a busy machine shows at once)
constexpr double kProbeShare = 0.05;     // a failed probe's slow decode may cost at most this share of the interval

}  // namespace

ThreadController::ThreadController(int32_t n_threads, bool adaptive, int32_t cores, int32_t others_running)
    : since_probe_(kProbeMin - kFirstProbe), interval_(kProbeMin), cores_(cores) {
    const int32_t n = std::max(1, n_threads);
    for (int32_t c : {n, adaptive ? n - 1 : n, adaptive ? (n + 1) / 2 : n, adaptive ? 1 : n}) {
        if (c >= 1 && std::find(candidates_.begin(), candidates_.end(), c) == candidates_.end()) {
            candidates_.push_back(c);
        }
    }
    times_.resize(candidates_.size());
    // A machine already busy: a decode on every thread waits for the ones descheduled (beside one
    // busy process a 2-thread prompt took 790 ms against 210 on one thread), so start with the
    // count that fits; a probe of all threads after the usual interval (not the first few decodes:
    // the machine was seen busy) switches back if it has turned quiet.
    if (cores > 0 && n + others_running > cores) {
        const int32_t fits = std::max(1, cores - others_running);
        while (current_ + 1 < candidates_.size() && candidates_[current_] > fits) {
            ++current_;
        }
        since_probe_ = 0;
    }
}

void ThreadController::set_load_reader(std::function<int32_t()> others_running) {
    others_running_ = std::move(others_running);
}

int32_t ThreadController::choose() {
    if (candidates_.size() == 1) {
        return candidates_[0];
    }
    const bool turned_slow = std::bitset<32>(slow_history_).count() >= kSlowCount;
    if (probe_left_ == 0 && (++since_probe_ >= interval_ || turned_slow)) {
        since_probe_ = 0;
        slow_history_ = 0;
        if (current_ != 0 && (try_all_next_ = !try_all_next_)) {
            trying_ = 0;  // every other probe: all threads, the count a quiet machine wants
        } else {
            trying_ = next_try_ == current_ ? (next_try_ + 1) % candidates_.size() : next_try_;
            next_try_ = (trying_ + 1) % candidates_.size();
        }
        // More threads beside work that holds the cores they need: one such decode took 0.5-2 s against
        // 10 ms on one thread (2-core AMD EPYC under KVM, a nice-10 job beside it). Look again next time.
        if (trying_ < current_ && others_running_ && cores_ > 0 &&
            candidates_[trying_] + others_running_() > cores_) {
            return candidates_[current_];
        }
        probe_on_slowdown_ = turned_slow;
        probe_left_ = turned_slow ? kProbeDecodesOnSlowdown : kProbeDecodes;
        times_[trying_] = Times{};  // timed afresh: the load may have changed since its last probe
    }
    return candidates_[probe_left_ > 0 ? trying_ : current_];
}

void ThreadController::observe(int32_t rows, int64_t us) {
    if (candidates_.size() == 1 || us <= 0) {
        return;
    }
    const size_t c = probe_left_ > 0 ? trying_ : current_;
    const int32_t threads = candidates_[c];
    const bool switched = threads != last_threads_;  // idle workers wake, caches refill: not a steady time
    last_threads_ = threads;
    const size_t b = (size_t) std::clamp(rows, 1, kBuckets) - 1;
    const double x = (double) us;
    // Not on a slowdown: the current count's average is still moving to its new level.
    if (c != current_ && !probe_on_slowdown_ && times_[current_].n[b] > 0 &&
        x > kGiveUp * times_[current_].us[b]) {
        probe_left_ = 0;  // far slower, switch or not: one such decode is enough to know
        // On a 2-core machine beside one busy process a 2-thread decode took 17x a 1-thread one
        // (AMD EPYC under KVM): probes every 32 decodes would double the time.
        const int32_t cap = current_ == 0 ? kProbeMax : kProbeMaxReduced;
        const double ratio = x / times_[current_].us[b];
        interval_ = std::min(std::max(2 * interval_, (int32_t) (ratio / kProbeShare)), cap);
        rebase();
        return;
    }
    if (!switched) {
        Times & t = times_[c];
        if (t.n[b] == 0) {
            t.us[b] = x;
        } else {
            t.us[b] += kWeight * (std::min(x, kOutlier * t.us[b]) - t.us[b]);
        }
        t.n[b] = std::min(t.n[b] + 1, 1 << 20);
        if (c == current_ && probe_left_ == 0) {
            if (reference_[b] == 0.0 && t.n[b] >= kReferenceAfter) {
                reference_[b] = t.us[b];
            }
            const bool slow = reference_[b] > 0.0 && x > kSlow * reference_[b];
            slow_history_ = ((slow_history_ << 1) | (slow ? 1u : 0u)) & ((1u << kSlowWindow) - 1);
        }
    }
    if (probe_left_ > 0 && --probe_left_ == 0) {
        end_probe();
    }
}

// The probed count against the current one, over the batch sizes both have timed.
void ThreadController::end_probe() {
    const Times & a = times_[trying_];
    const Times & b = times_[current_];
    double probed = 0.0, now = 0.0;
    for (int32_t i = 0; i < kBuckets; ++i) {
        if (a.n[i] > 0 && b.n[i] > 0) {
            probed += a.us[i];
            now += b.us[i];
        }
    }
    if (now > 0.0 && probed < kBetter * now) {
        current_ = trying_;
        interval_ = kProbeMin;
    } else if (probe_on_slowdown_) {
        interval_ = kProbeMin;  // the load changed: the times of both will say more soon
    } else if (now > 0.0) {
        interval_ = std::min(2 * interval_, current_ == 0 ? kProbeMax : kProbeMaxReduced);
    }
    rebase();
}

// What the current count's decodes take now becomes the usual time: a load that stays is no
// longer a change, and a count just switched to is judged by its own times.
void ThreadController::rebase() {
    const Times & t = times_[current_];
    for (int32_t i = 0; i < kBuckets; ++i) {
        reference_[i] = t.n[i] > 0 ? t.us[i] : 0.0;
    }
    slow_history_ = 0;
}

}  // namespace mtp
