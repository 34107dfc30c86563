#include "draft_controller.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace mtp {

namespace {

constexpr int32_t kMinSamples = 2;         // iterations at a length before its time counts as measured
constexpr int32_t kMinPlainSamples = 3;    // plain iterations measured before anything is drafted
constexpr double kCostWeight = 0.1;        // weight of a new head step time in its decayed average
constexpr double kOutlier = 2.0;           // a head step above this multiple of the average counts as this multiple
constexpr size_t kRecentSamples = 8;       // steady times kept per length: its time is their lower median
constexpr double kObservationDecay = 0.99; // acceptance evidence: weight left after each observation...
constexpr double kPlainDecay = 0.99;       // ...and after each token decoded without drafting
constexpr double kFastDecay = 0.8;         // a short memory beside the long one, to see changes
constexpr double kChange = 0.4;            // the two differ this much: the text changed, forget the long one
constexpr double kNewCallWeight = 0.5;    // a new call (new text) keeps this share of the acceptance evidence
constexpr double kPriorAccepted = 0.5;     // prior acceptance, worth one observation
constexpr double kPositionPrior = 4.0;     // a later position's acceptance leans on the one before as this many observations
constexpr int32_t kProbeMin = 32;          // plain rounds before the first probe
constexpr int32_t kProbeMax = 1024;        // longest interval between probes (rounds)
constexpr int32_t kBurstIterations = 3;    // iterations of each probe or try of another length
constexpr int32_t kExploreEvery = 32;      // drafting iterations between tries of a neighbouring length...
constexpr int32_t kExploreMax = 256;       // ...doubling up to this while each try finds the neighbour clearly worse
constexpr double kClearlyWorse = 0.9;      // a neighbour below this share of the best rate is clearly worse...
constexpr double kClearlyWorseStreams = 0.95;  // ...with several streams
constexpr double kDraftingTie = 1.04;      // several streams: drafting within this factor of plain decoding's rate wins
constexpr double kProbeMemory = 3.0;       // a probe weighs the acceptance evidence before it as this many rounds' observations
constexpr int64_t kSampleSpan = 128;       // rounds a steady time stays one of its length's samples...
constexpr size_t kKeptSamples = 1;         // ...beside the newest (so one burst of 2 replaces them)
constexpr int64_t kAdjacentRounds = 3;     // rounds between two lengths' steady rounds that compare them at one moment
constexpr int32_t kPairMemory = 4;         // a length's relative cost averages its latest comparisons, about this many
constexpr int64_t kQueuedPerToken = 4;     // after a plain stretch, drafting waits while the calls have fewer tokens
                                           // left than queued rows / this

}  // namespace

DraftController::DraftController(int32_t n_max)
    : n_max_(n_max),
      acc_num_((size_t) n_max, kPriorAccepted),
      acc_den_((size_t) n_max, 1.0),
      fast_num_((size_t) n_max, kPriorAccepted),
      fast_den_((size_t) n_max, 1.0),
      acc_seen_((size_t) n_max, false),
      explore_every_(kExploreEvery) {
    costs();
    if (const char * path = std::getenv("MTP_LLM_CONTROLLER_TRACE"); path != nullptr) {
        trace_path_ = path;
    }
}

DraftController::Costs & DraftController::costs_of(Shape shape) {
    for (Costs & t : costs_) {
        if (t.shape == shape) {
            seed_from_nearest(t);
            return t;
        }
    }
    Costs made;
    made.shape = shape;
    made.probe_interval = kProbeMin;
    made.us.assign((size_t) n_max_ + 1, 0.0);
    made.n.assign((size_t) n_max_ + 1, 0);
    made.seeded.assign((size_t) n_max_ + 1, false);
    made.recent.assign((size_t) n_max_ + 1, {});
    made.log_relative.assign((size_t) n_max_ + 1, 0.0);
    made.relative_known.assign((size_t) n_max_ + 1, false);
    made.pairs.assign((size_t) n_max_ + 1, 0);
    for (auto & r : made.recent) {
        r.reserve(kRecentSamples);
    }
    costs_.push_back(std::move(made));
    seed_from_nearest(costs_.back());
    return costs_.back();
}

// A number of streams without a steady time of its own at some length (calls start and end, so a
// session meets 1 and 3 streams for a round or two between calls of 4) takes, length by length, the
// time of the nearest number of streams on the same thread count that measured that length itself: a
// far better guess than none, which would mean plain rounds and bursts at every length each time; its
// own first steady time replaces it. (Of two as near, the one of more streams: its longer verifies make
// the guess the cautious one. Length by length: four streams that never measured plain decoding
// themselves, having backed off from trying it, still lend three streams their drafting times.)
void DraftController::seed_from_nearest(Costs & made) {
    auto nearer = [&made](const Costs * a, const Costs & b) {
        const int32_t da = a ? std::abs(a->shape.streams - made.shape.streams) : INT32_MAX;
        const int32_t db = std::abs(b.shape.streams - made.shape.streams);
        return db < da || (db == da && b.shape.streams > a->shape.streams);
    };
    for (int32_t k = 0; k <= n_max_; ++k) {
        const int32_t needed = k == 0 ? kMinPlainSamples : kMinSamples;
        if (made.n[k] >= needed && !made.seeded[k]) {
            continue;
        }
        const Costs * nearest = nullptr;
        for (const Costs & t : costs_) {
            if (&t != &made && t.shape.threads == made.shape.threads && t.n[k] >= needed && !t.seeded[k] &&
                nearer(nearest, t)) {
                nearest = &t;
            }
        }
        if (nearest != nullptr) {
            made.us[k] = nearest->us[k];
            made.n[k] = needed;
            made.seeded[k] = true;
            made.log_relative[k] = nearest->log_relative[k];
            made.relative_known[k] = nearest->relative_known[k];
            made.pairs[k] = 0;
        }
    }
    if (made.head_step_us == 0.0) {
        const Costs * nearest = nullptr;
        for (const Costs & t : costs_) {
            if (&t != &made && t.shape.threads == made.shape.threads && t.head_step_us > 0.0 && nearer(nearest, t)) {
                nearest = &t;
            }
        }
        if (nearest != nullptr) {
            made.head_step_us = nearest->head_step_us;
        }
    }
}

DraftController::Costs & DraftController::costs() {
    return costs_of(shape_);
}

const DraftController::Costs & DraftController::costs() const {
    for (const Costs & t : costs_) {
        if (t.shape == shape_) {
            return t;
        }
    }
    return costs_.front();  // not reached: choose() makes the current shape's table
}

double DraftController::acceptance(int32_t i, bool optimistic) const {
    if (optimistic && !acc_seen_[i]) {
        // A position never drafted is taken to accept like the one before it (a chain's acceptance given
        // the drafts before it varies little from position to position), or every draft before any was seen.
        return i == 0 ? 1.0 : acceptance(i - 1, true);
    }
    if (i == 0) {
        return acc_num_[0] / acc_den_[0];
    }
    // A later position is drafted only in the rounds that draft that far, often few and all at one
    // moment of the text: its own evidence is weighed against the position before it (worth
    // kPositionPrior observations), so that a few lucky rounds cannot make long drafts look certain
    // (without the prior, two streams at 0.75 drafted 3 on an estimate of 0.9-1.0 for positions 1-2,
    // where they accept 0.6-0.7).
    return (acc_num_[i] + kPositionPrior * acceptance(i - 1, false)) / (acc_den_[i] + kPositionPrior);
}

double DraftController::expected_tokens(int32_t k, bool optimistic) const {
    double e = 1.0, all_accepted = 1.0;
    for (int32_t i = 0; i < k; ++i) {
        all_accepted *= acceptance(i, optimistic);
        e += all_accepted;
    }
    return e;
}

bool DraftController::measured(int32_t k) const {
    return costs().n[k] >= (k == 0 ? kMinPlainSamples : kMinSamples);
}

// The machine's speed moves by tens of percent within seconds, so times taken at different moments
// compare badly: a length tried in a fast moment kept looking better than the one in use whenever
// that one ran slow (compared by absolute times, four streams at forced acceptance ran 4 drafts, 0.85x,
// for hundreds of rounds). With several streams lengths are therefore compared by their relative costs, each set from a
// length's first steady rounds against the previous length's last ones, a round or two apart; the
// absolute time of the length measured last sets the scale. One stream keeps its absolute times: its
// rounds are short and many, and comparisons of two rounds against two cost it more in precision
// than they gained (on the built-in model's recorded drafts, first calls 0.952x the best fixed length
// against 0.975x, with 10% noise per round and no drift).
double DraftController::relative_time(int32_t k) const {
    const Costs & t = costs();
    const int32_t anchor = t.run.length;
    if (t.shape.streams == 1 || anchor < 0 || !t.relative_known[k] || !t.relative_known[anchor] ||
        t.us[anchor] <= 0.0) {
        return t.us[k];
    }
    return t.us[anchor] * std::exp(t.log_relative[k] - t.log_relative[anchor]);
}

double DraftController::cost(int32_t k) const {
    const Costs & t = costs();
    if (measured(k)) {
        return relative_time(k);
    }
    int32_t j = k - 1;
    while (j > 0 && !measured(j)) {
        --j;
    }
    // Each draft beyond j adds a head step and a verify row: at least the mean growth per draft up to j
    // (lengths cost ever more per draft as the verify batch grows), and at least a head step.
    const double per_draft = j > 0 ? std::max(t.head_step_us, (relative_time(j) - relative_time(0)) / j) : t.head_step_us;
    return relative_time(j) + (k - j) * per_draft;
}

int32_t DraftController::best_measured(int32_t limit, double & rate) const {
    int32_t best = 0;
    rate = 0.0;
    for (int32_t k = 1; k <= limit; ++k) {
        if (measured(k)) {
            const double r = expected_tokens(k, false) / relative_time(k);
            if (r > rate) {
                rate = r;
                best = k;
            }
        }
    }
    // With several streams a near tie goes to drafting: while drafting, plain decoding is measured again in
    // the steps down for the price of three plain rounds, but while decoding plainly, drafting is measured
    // only by a probe, which first catches the head up on every row of the plain stretch (four streams:
    // 18 ms after 32 plain rounds of 7 ms), so probes grow rare and a plain choice made on a few early rounds
    // stood for whole runs (without the tie margin, four streams at 0.75 decoded plainly in 75% of the
    // rounds where one draft was 17% faster).
    const double plain = expected_tokens(0, false) / relative_time(0);
    const double tie = shape_.streams > 1 ? kDraftingTie : 1.0;
    if (best == 0 || rate * tie < plain) {
        rate = plain;
        return 0;
    }
    return best;
}

int32_t DraftController::start_burst(int32_t k, int32_t iterations, bool probe) {
    burst_length_ = k;
    burst_left_ = iterations - 1;
    burst_is_probe_ = probe;
    return k;
}

int32_t DraftController::decide(int32_t limit, int64_t remaining, int64_t queued) {
    if (limit < 0) {
        why_ = "joining";
        return 0;
    }
    if (limit <= 0 || !measured(0)) {
        why_ = limit <= 0 ? "no-room" : "unmeasured";
        return 0;
    }
    if (burst_left_ > 0) {
        why_ = "burst";
        --burst_left_;
        return std::min(burst_length_, limit);
    }
    // The first draft after a plain stretch decodes every row the head queued meanwhile, for every stream:
    // near the calls' ends the drafts left cannot repay it (four streams at 0.75, plain for 90
    // rounds; when the first call ended the other three drafted their last few tokens, and the catch-up
    // and its rounds cost 60-130 ms of a 1.4 s batch: the gap to plain decoding).
    if (choice_ == 0 && remaining >= 0 && queued > kQueuedPerToken * remaining) {
        why_ = "ending";
        return 0;
    }
    double best_rate = 0.0;
    const int32_t best = best_measured(limit, best_rate);
    if (burst_is_probe_) {
        // The probe's own number of streams learns from it: plain decoding winning at four streams
        // says little about two (probes at four streams, counted for every shape, stretched the interval to
        // hundreds of rounds, and a batch of two then decoded plainly from start to end).
        burst_is_probe_ = false;
        int32_t & interval = costs_of(probe_shape_).probe_interval;
        interval = best == 0 ? std::min(2 * interval, kProbeMax) : kProbeMin;
    }
    if (burst_is_explore_) {
        burst_is_explore_ = false;
        // With several streams a try is dearer (every stream drafts its length, and the switches to and from it
        // rebuild larger graphs) and the neighbours of the best length are often within 10% of it (four
        // streams at 0.75: two drafts 8% and plain decoding 3-18% behind one), so tries back off from 5%.
        const double clearly = shape_.streams > 1 ? kClearlyWorseStreams : kClearlyWorse;
        const bool worse = !measured(burst_length_) ||
                           expected_tokens(burst_length_, false) / relative_time(burst_length_) < clearly * best_rate;
        explore_every_ = worse ? std::min(2 * explore_every_, kExploreMax) : kExploreEvery;
    }
    // One draft more than the best is tried while it is not measured and could beat it (a length two
    // beyond the best can only win where the one between would: E(k) grows ever slower, T(k) no slower).
    const int32_t next = best + 1;
    if (next <= limit && !measured(next) && expected_tokens(next, true) / cost(next) > best_rate) {
        why_ = "try";
        return start_burst(next, kBurstIterations, false);
    }
    if (best == 0) {
        if (plain_run_ < costs().probe_interval) {
            why_ = "best";
            return 0;
        }
        // The most promising drafting length, if only acceptance has gone up. With several streams every
        // draft adds a verify row per stream, so the probe asks with one draft: longer lengths are then
        // tried one above the best, as from any other start.
        int32_t probe = 1;
        double rate = 0.0;
        for (int32_t k = 1; k <= (shape_.streams > 1 ? 1 : limit); ++k) {
            const double r = expected_tokens(k, false) / cost(k);
            if (r > rate) {
                rate = r;
                probe = k;
            }
        }
        plain_run_ = 0;
        // The probe is judged on what it sees: evidence from before the plain stretch (a text that has
        // since moved on, and often the first drafts of an answer, the hardest) must not outvote it.
        // (A round's streams are one moment's evidence: the probe's rounds count, not its streams' drafts.)
        const double memory = kProbeMemory * shape_.streams;
        for (int32_t i = 0; i < n_max_; ++i) {
            if (acc_den_[i] > memory) {
                acc_num_[i] *= memory / acc_den_[i];
                acc_den_[i] = memory;
            }
        }
        why_ = "probe";
        probe_shape_ = shape_;
        return start_burst(probe, kBurstIterations, true);
    }
    // Lengths not in use are measured again now and then, one step up or down in
    // turn: costs drift (the context grows, the machine's load changes) and plain
    // decoding's own time is the baseline of every choice.
    if (++since_explore_ >= explore_every_) {
        since_explore_ = 0;
        explore_down_ = !explore_down_ || best == limit;
        burst_is_explore_ = true;
        why_ = "explore";
        // Plain decoding is measured only one step below 1, yet with several streams it is often within a few
        // percent of the best length: a time of it older than kSampleSpan rounds is measured again in place of
        // the step down (otherwise four streams at 0.75 kept a plain time from a slow first call, 19 ms where
        // it takes 13, and drafted 2 for the whole session where plain decoding was fastest).
        // Every other such step down stays one step down (otherwise four streams at 0.75 settled on 2 while
        // plain decoding's time went stale between steps down, so they all measured plain decoding, never 1,
        // whose time from a slow spell kept it looking worse: 1 is best there, 8% faster than 2).
        const auto & plain = costs().recent[0];
        const bool plain_stale =
            shape_.streams > 1 && best > 1 && (plain.empty() || plain.back().first < rounds_ - kSampleSpan);
        int32_t step = best + 1;
        if (explore_down_) {
            explore_plain_ = plain_stale && !explore_plain_;
            step = explore_plain_ ? 0 : best - 1;
        }
        return start_burst(step, kBurstIterations, false);
    }
    why_ = "best";
    return best;
}

int32_t DraftController::choose(int32_t limit, int32_t streams, int32_t threads, int64_t remaining, int64_t queued) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!trace_path_.empty()) {
        // Opened by the first choice: only a session on auto writes (every session of a benchmark has a
        // controller, and the fixed lengths' observations would mix into the file); a line at a time, so
        // that two sessions on auto interleave whole lines.
        trace_.reset(std::fopen(trace_path_.c_str(), "a"));
        if (trace_) {
            std::setvbuf(trace_.get(), nullptr, _IOLBF, 0);
        }
        trace_path_.clear();
    }
    shape_ = Shape{std::max(1, streams), std::max(0, threads)};
    costs();
    choice_ = decide(std::min(limit, n_max_), remaining, queued);
    if (choice_ == 0) {
        ++plain_run_;  // rounds, not streams' tokens: a probe's 3 rounds stay a bounded share of the rounds
    }
    if (trace_) {
        std::fprintf(trace_.get(), "choose %d %d %d %d %s %lld %lld\n", shape_.streams, shape_.threads, limit, choice_,
                     why_, (long long) remaining, (long long) queued);
    }
    return choice_;
}

bool DraftController::expects_plain() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return choice_ == 0 && burst_left_ == 0;
}

void DraftController::interrupt() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (trace_) {
        std::fputs("interrupt\n", trace_.get());
    }
    previous_ = -1;
    // Costs belong to the machine and stay; acceptance belongs to the text, which a
    // new call changes: its evidence keeps a share, so the new text soon dominates.
    for (int32_t i = 0; i < n_max_; ++i) {
        acc_num_[i] *= kNewCallWeight;
        acc_den_[i] *= kNewCallWeight;
    }
}

void DraftController::skip_round() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (trace_) {
        std::fputs("skip\n", trace_.get());
    }
    previous_ = -1;
}

void DraftController::observe(int32_t drafted, int32_t accepted, int64_t us, int64_t head_us, bool resumed) {
    std::lock_guard<std::mutex> lock(mutex_);
    observe_acceptance_locked(drafted, accepted);
    observe_cost_locked(drafted, Shape{1, shape_.threads}, us, head_us, resumed);
}

void DraftController::observe_acceptance(int32_t drafted, int32_t accepted) {
    std::lock_guard<std::mutex> lock(mutex_);
    observe_acceptance_locked(drafted, accepted);
}

void DraftController::observe_cost(int32_t drafted, int32_t streams, int64_t us, int64_t head_us, bool resumed,
                                   int32_t threads) {
    std::lock_guard<std::mutex> lock(mutex_);
    observe_cost_locked(drafted, Shape{std::max(1, streams), std::max(0, threads)}, us, head_us, resumed);
}

void DraftController::observe_round(int32_t drafted, int32_t streams, int64_t us, int64_t compute_us, int64_t head_us,
                                    bool resumed, int32_t threads) {
    std::lock_guard<std::mutex> lock(mutex_);
    observe_cost_locked(drafted, Shape{std::max(1, streams), std::max(0, threads)}, us, head_us, resumed, compute_us);
}

void DraftController::observe_acceptance_locked(int32_t drafted, int32_t accepted) {
    drafted = std::clamp(drafted, 0, n_max_);
    if (trace_) {
        std::fprintf(trace_.get(), "accept %d %d\n", drafted, accepted);
    }
    if (drafted == 0) {
        for (int32_t i = 0; i < n_max_; ++i) {
            acc_num_[i] *= kPlainDecay;
            acc_den_[i] *= kPlainDecay;
        }
    }
    // The short memory spans a few rounds whatever the number of streams: the streams of one round
    // are evidence of one moment (and often of similar texts), so a round's bad luck is no change of text.
    const double fast_decay = shape_.streams > 1 ? std::pow(kFastDecay, 1.0 / shape_.streams) : kFastDecay;
    for (int32_t i = 0; i < drafted && i <= accepted; ++i) {
        const double outcome = i < accepted ? 1.0 : 0.0;
        acc_num_[i] = kObservationDecay * acc_num_[i] + outcome;
        acc_den_[i] = kObservationDecay * acc_den_[i] + 1.0;
        fast_num_[i] = fast_decay * fast_num_[i] + outcome;
        fast_den_[i] = fast_decay * fast_den_[i] + 1.0;
        if (std::abs(fast_num_[i] / fast_den_[i] - acc_num_[i] / acc_den_[i]) > kChange) {
            acc_num_[i] = fast_num_[i];
            acc_den_[i] = fast_den_[i];
        }
        acc_seen_[i] = true;
    }
}

void DraftController::observe_cost_locked(int32_t drafted, Shape shape, int64_t us, int64_t head_us,
                                          bool resumed, int64_t compute_us) {
    drafted = std::clamp(drafted, 0, n_max_);
    // Only an iteration of the same length and shape as the one before measures that
    // steady cost: after a switch the first pass rebuilds its compute graphs.
    ++rounds_;
    const bool steady = drafted == previous_ && shape == previous_shape_ && !resumed && us > 0;
    previous_ = drafted;
    previous_shape_ = shape;
    if (trace_ && compute_us >= 0) {
        std::fprintf(trace_.get(), "compute %lld\n", (long long) compute_us);
    }
    if (trace_) {
        std::fprintf(trace_.get(), "cost %d %d %d %lld %d\n", drafted, shape.streams, shape.threads, (long long) us,
                     steady ? 1 : 0);
    }
    if (!steady) {
        return;
    }
    Costs & t = costs_of(shape);
    // Times only grow when the machine is busy (preemption, page faults, a stalled thread), so a length's
    // time is the lower median of its latest steady samples: one stalled sample moves nothing, and a length
    // measured only in the short bursts of a probe or a neighbour's try is judged like the one in use
    // (with the mean instead, a burst caught in a stall kept a length looking worse for many tries).
    auto & recent = t.recent[(size_t) drafted];
    const bool was_seeded = t.seeded[drafted];
    if (was_seeded) {
        t.seeded[drafted] = false;
        recent.clear();
    }
    // A length not in use keeps the times of when it last ran, which a busy or a quiet spell since may have
    // made wrong, and it is measured again only in bursts of 2 steady rounds: so times older than
    // kSampleSpan rounds make way for new ones, down to the newest kKeptSamples (when all were kept, plain
    // decoding measured in a slow spell kept looking 35% slower than it was for hundreds of rounds at four
    // streams, and two streams drafted 3 where lengths 1 and 2, measured in a stall, were 10-30% faster).
    while (!recent.empty() && (recent.size() >= kRecentSamples ||
                               (recent.size() > kKeptSamples && recent.front().first < rounds_ - kSampleSpan))) {
        recent.erase(recent.begin());
    }
    recent.emplace_back(rounds_, (double) us);
    if (!t.relative_known[drafted] || was_seeded) {
        t.log_relative[drafted] = std::log((double) us);  // the absolute time, until a comparison sets it
        t.relative_known[drafted] = true;
        t.pairs[drafted] = 0;
    }
    Costs::Run & run = t.run;
    if (run.length != drafted) {
        // A run's first steady round comes two rounds after the previous run's last (the switch between).
        t.previous_run = run.last_round >= rounds_ - kAdjacentRounds ? run : Costs::Run{};
        run = Costs::Run{};
        run.length = drafted;
    }
    run.us[0] = run.us[1];
    run.us[1] = (double) us;
    run.last_round = rounds_;
    if (run.count < 2 && ++run.count == 2) {
        compare_with_previous_run(t);
    }
    std::array<double, kRecentSamples> sorted{};
    std::transform(recent.begin(), recent.end(), sorted.begin(), [](const auto & r) { return r.second; });
    const auto middle = sorted.begin() + (ptrdiff_t) (recent.size() - 1) / 2;
    std::nth_element(sorted.begin(), middle, sorted.begin() + (ptrdiff_t) recent.size());
    t.us[drafted] = *middle;
    t.n[drafted] = std::min(t.n[drafted] + 1, 1 << 20);
    if (drafted > 0 && head_us > 0) {
        const double step = (double) head_us / drafted;
        t.head_step_us = t.head_step_us == 0.0 ? step
                                               : t.head_step_us + kCostWeight * (std::min(step, kOutlier * t.head_step_us) - t.head_step_us);
    }
}

// A length's first two steady rounds against the previous length's last two (the faster of each: a stall
// only slows): their ratio is the two lengths' relative cost at one moment, whatever the machine's speed.
// The new run's length moves by 1/n of the gap, n counting its comparisons up to kPairMemory (a first
// one sets it), so that the length in use is corrected too when the machine treats the lengths
// differently than before.
void DraftController::compare_with_previous_run(Costs & t) {
    const Costs::Run & before = t.previous_run;
    const int32_t k = t.run.length;
    if (before.length < 0 || before.count == 0 || !t.relative_known[before.length]) {
        return;
    }
    const double target = t.log_relative[before.length] + std::log(t.run.fastest() / before.fastest());
    t.pairs[k] = std::min(t.pairs[k] + 1, kPairMemory);
    t.log_relative[k] += (target - t.log_relative[k]) / t.pairs[k];
    if (trace_) {
        std::fprintf(trace_.get(), "relative %d %d %d %.0f\n", k, before.length, t.shape.streams,
                     1000.0 * std::exp(t.log_relative[k] - t.log_relative[before.length]));
    }
}

ControllerEstimates DraftController::estimates() const {
    std::lock_guard<std::mutex> lock(mutex_);
    ControllerEstimates e;
    for (int32_t i = 0; i < n_max_; ++i) {
        e.acceptance.push_back(acceptance(i, false));
    }
    e.streams = shape_.streams;
    e.threads = shape_.threads;
    for (int32_t k = 0; k <= n_max_; ++k) {
        const bool known = measured(k);
        e.iteration_us.push_back(known ? relative_time(k) : 0.0);
        e.expected_tokens_per_s.push_back(known ? expected_tokens(k, false) * 1e6 / relative_time(k) : 0.0);
    }
    e.choice = choice_;
    e.probe_interval = costs().probe_interval;
    return e;
}

}  // namespace mtp
