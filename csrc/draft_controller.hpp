// n_draft="auto": picks each iteration's draft length (0 = plain decoding) to
// maximise expected committed tokens per second, from the session's own
// measurements. Cost model and policy: docs/draft-controller.md.
//
//   E(k) = 1 + a_0 + a_0 a_1 + ... + a_0...a_{k-1}   tokens committed by an iteration of k drafts
//   T(k) = measured time of an iteration that drafted k (lower median of the latest 8 steady ones)
//   rate(k) = E(k) / T(k)
//
// a_i is the acceptance at draft position i given that the drafts before it were
// accepted, a decayed average over observations (and over plain tokens, so that
// evidence goes stale while nothing is drafted); a short-memory average beside it
// replaces it when the two disagree widely (the text changed), and a new call keeps
// only part of it (a new text). The length one above the best measured is tried when
// a bound says it could beat it (a position never observed accepts like the one before;
// T grows per draft at least as fast as it did up to the longest measured length). When
// plain decoding wins, short probes at doubling intervals (in rounds) check whether that
// is still true, so the cost of looking stays a bounded share of the decode; a probe
// weighs the evidence from before it as a few observations, so that an answer's first
// drafts cannot outvote it. Neighbouring lengths are re-measured every 32 drafting
// iterations, less often while they stay clearly worse (10% behind; 5% with several
// streams). T(k) is measured only on iterations that follow one of the same length
// (steady state), from samples of the last 128 rounds where newer ones have come (a length
// measured in a slow spell is not held to it).
// With several streams lengths are compared by relative costs taken at one moment (a length's first
// steady rounds against the previous length's last), scaled by the time of the length measured last,
// and drafting within 4% of plain decoding's rate wins (a probe of drafting costs the head's catch-up).
// A later position's acceptance leans on the one before it (a few rounds that drafted that
// far prove little). With several streams probes draft one token, each number of streams keeps
// its own probe interval, a probe's streams count as rounds, and a plain time older than 128
// rounds is measured again in place of every other step down. After a plain stretch, drafting waits
// while the calls have too few tokens left to repay the head's catch-up of the rows queued
// meanwhile; a round with a caller waiting to join is plain (limit < 0).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace mtp {

struct ControllerEstimates {
    std::vector<double> acceptance;    // [i]: P(draft i accepted | drafts before it accepted)
    int32_t streams = 1;               // concurrent streams the times below are for (the last choice's)
    int32_t threads = 0;               // and compute threads (0: not given)
    std::vector<double> iteration_us;  // [k]: time of an iteration drafting k (0 = not measured yet)
    std::vector<double> expected_tokens_per_s;  // [k]: E(k) / T(k) (0 = not measured yet)
    int32_t choice = 0;                // the length chosen last
    int32_t probe_interval = 0;        // plain rounds between probes while plain decoding wins (at `streams`)
};

class DraftController {
public:
    explicit DraftController(int32_t n_max);

    // Draft length for the next iteration of `streams` concurrent streams on `threads` compute
    // threads (0: not given), in [0, min(limit, n_max)]. Costs are kept per (streams, threads).
    // `remaining`: the tokens the streams on auto may still produce, all together; `queued`: the
    // rows their head has queued since they last drafted (its catch-up), all together (-1: not known).
    // `limit` < 0: plain decoding, with no other effect (a caller waits to join the next round).
    int32_t choose(int32_t limit, int32_t streams = 1, int32_t threads = 0, int64_t remaining = -1,
                   int64_t queued = -1);
    // Whether the next choice is plain decoding with no probe due (the head may
    // skip work it would only need for drafting, such as the prompt).
    bool expects_plain() const;
    // One iteration: `drafted` tokens proposed, the first `accepted` accepted, the
    // iteration took `us` of which the MTP head `head_us`. `resumed`: the head
    // first caught up on a plain stretch (a switching cost, not a steady one).
    void observe(int32_t drafted, int32_t accepted, int64_t us, int64_t head_us, bool resumed);
    // The same, split for iterations of several streams: each stream's drafts...
    void observe_acceptance(int32_t drafted, int32_t accepted);
    // ...and, once per iteration, its time (every stream drafted `drafted`; `head_us` in total).
    void observe_cost(int32_t drafted, int32_t streams, int64_t us, int64_t head_us, bool resumed,
                      int32_t threads = 0);
    // The same for the engine's rounds, whose `us` is their period; `compute_us`, the part spent in the
    // round itself, goes to the trace only.
    void observe_round(int32_t drafted, int32_t streams, int64_t us, int64_t compute_us, int64_t head_us,
                       bool resumed, int32_t threads);
    // The next iteration does not follow the last observed one (a new call).
    void interrupt();
    // A round that is no cost sample and leaves the next one unsteady (a probe of another
    // thread count: the round after it re-wakes a pool of another size).
    void skip_round();

    ControllerEstimates estimates() const;  // any thread

private:
    // What an iteration's time depends on beside its draft length.
    struct Shape {
        int32_t streams = 1;
        int32_t threads = 0;
        bool operator==(const Shape & o) const { return streams == o.streams && threads == o.threads; }
    };
    // Iteration times at one shape.
    struct Costs {
        Shape shape;
        std::vector<double> us;
        std::vector<int32_t> n;
        std::vector<bool> seeded;  // [k]: copied from another number of streams; the first steady time replaces it
        // [k]: the latest steady times (round, us), oldest first; us[k] is their lower median
        std::vector<std::vector<std::pair<int64_t, double>>> recent;
        double head_step_us = 0.0;
        int32_t probe_interval = 0;  // plain rounds between probes at this shape (from kProbeMin, doubling)
        // [k]: log of k's relative cost, from times taken at the same moment as another length's (see
        // relative_time()); only differences mean anything. `pairs`: the comparisons it averages.
        std::vector<double> log_relative;
        std::vector<bool> relative_known;
        std::vector<int32_t> pairs;
        // The steady rounds of the length running now at this shape and of the one before it (their
        // last two times): a length's first steady rounds after a switch are compared with the
        // previous length's last ones, taken a round or two apart.
        struct Run {
            int32_t length = -1;
            int64_t last_round = -1;
            int32_t count = 0;          // its steady rounds, up to 2
            double us[2] = {0.0, 0.0};  // its last two steady times, the latest second
            double fastest() const { return count > 1 ? std::min(us[0], us[1]) : us[1]; }
        };
        Run run, previous_run;
    };
    Costs & costs_of(Shape shape);  // made on first use, seeded from the nearest shape (mutex_ held)
    void seed_from_nearest(Costs & t);  // lengths without a steady time of their own (mutex_ held)
    Costs & costs();              // the current shape's (mutex_ held)
    const Costs & costs() const;
    void observe_acceptance_locked(int32_t drafted, int32_t accepted);
    void observe_cost_locked(int32_t drafted, Shape shape, int64_t us, int64_t head_us, bool resumed,
                             int64_t compute_us = -1);
    double acceptance(int32_t i, bool optimistic) const;
    double expected_tokens(int32_t k, bool optimistic) const;
    bool measured(int32_t k) const;
    double relative_time(int32_t k) const;  // k's time at the machine's speed now (measured lengths)
    void compare_with_previous_run(Costs & t);
    double cost(int32_t k) const;  // measured, or a lower bound from the nearest measured shorter length
    int32_t best_measured(int32_t limit, double & rate) const;
    int32_t decide(int32_t limit, int64_t remaining, int64_t queued);
    int32_t start_burst(int32_t k, int32_t iterations, bool probe);

    const int32_t n_max_;
    mutable std::mutex mutex_;
    std::vector<double> acc_num_, acc_den_;    // decayed counts per position
    std::vector<double> fast_num_, fast_den_;  // the same with a short memory
    std::vector<bool> acc_seen_;
    std::vector<Costs> costs_;    // one per shape seen (a handful)
    Shape shape_;                 // of the iteration being chosen
    int32_t plain_run_ = 0;       // plain rounds since the last probe
    Shape probe_shape_;           // of the last probe
    // A burst: a few iterations at one length (a probe from plain decoding, or a try
    // of a length not measured lately), so that its steady cost gets measured.
    int32_t burst_length_ = 0;
    int32_t burst_left_ = 0;
    bool burst_is_probe_ = false;
    int32_t previous_ = -1;       // length of the last observed iteration (-1: none, or a new call)
    Shape previous_shape_{0, 0};
    int64_t rounds_ = 0;          // rounds observed (the age of a cost sample)
    int32_t since_explore_ = 0;   // drafting iterations since trying a neighbouring length
    int32_t explore_every_;       // drafting iterations between such tries (longer while they find nothing)
    bool burst_is_explore_ = false;
    bool explore_down_ = false;   // the last try was one draft fewer
    bool explore_plain_ = false;  // the last try down measured plain decoding in place of one draft fewer
    int32_t choice_ = 0;
    const char * why_ = "";       // what decided the last choice (for the trace)
    // MTP_LLM_CONTROLLER_TRACE=path appends every choice and observation to that file, one per line
    // (benchmarks/controller_trace.py reads it): how a run's lengths came about, for tuning.
    std::unique_ptr<std::FILE, int (*)(std::FILE *)> trace_{nullptr, &std::fclose};
    std::string trace_path_;  // MTP_LLM_CONTROLLER_TRACE when the session was made, until the first choice opens it
};

}  // namespace mtp
