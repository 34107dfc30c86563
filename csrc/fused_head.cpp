// The fused driver as a draft source: mtp_llm's MtpDrafter (drafter.hpp), whose head
// catch-up rides in the first draft decode of each iteration.
#include <cstdio>
#include <memory>

#include "draft_source.hpp"
#include "drafter.hpp"
#include "runtime.hpp"

namespace mtp {

namespace {

struct FusedSnapshot final : DraftSnapshot {
    explicit FusedSnapshot(MtpDrafter::Snapshot s) : value(std::move(s)) {}
    size_t bytes() const override { return value.bytes(); }
    MtpDrafter::Snapshot value;
};

class FusedHead final : public DraftSource {
public:
    FusedHead(llama_context * target, llama_context * head, const ContextOptions & opts)
        : drafter_(target, head, opts.n_parallel, opts.p_min), n_draft_max_(longest_draft(opts)) {}

    const char * name() const override { return "fused"; }
    // The head reads every prompt row: cheap (one block per row), and a head that lacks the
    // prompt's first rows drafts worse for the whole call.
    bool may_defer_prompt() const override { return false; }
    bool reads_every_slot() const override { return false; }

    void reset(Slot & s) override { drafter_.reset(s.seq); }
    void keep_prefix(Slot & s, llama_pos n, bool h_valid) override { drafter_.keep_prefix(s.seq, n, h_valid); }

    void prompt_chunk(Slot & s, const common_batch & chunk, bool) override {
        if (const int32_t rc = drafter_.process_prompt(s.seq, chunk); rc != 0) {
            head_failed(rc, "process the prompt");
        }
    }
    void prompt_done(Slot &) override {}

    void draft(const std::vector<Slot *> & slots, const common_batch &) override {
        requests_.clear();
        samplings_.clear();
        samplings_.reserve(slots.size());  // requests_ point into it
        for (Slot * s : slots) {
            Slot::Round & r = s->round;
            if (r.n_max > 0) {
                r.resumed = drafter_.pending_rows(s->seq) > (size_t) n_draft_max_ + 1;
                r.draft_q.clear();
                const MtpDrafter::Sampling * sampling = nullptr;
                if (s->call.draft_temp > 0.0f) {
                    samplings_.push_back({s->call.draft_temp, &s->call.rng, &r.draft_q, s->call.draft_top_k,
                                          s->call.draft_top_p, s->call.draft_min_p});
                    sampling = &samplings_.back();
                }
                requests_.push_back({s->seq, s->cache.id_last, s->cache.n_past, r.n_max, &r.draft_tokens,
                                     r.grammar ? &r.grammar : nullptr, r.forced_room, &r.n_forced, sampling});
            }
        }
        if (requests_.empty()) {
            return;  // plain decoding this iteration
        }
        const int64_t t0 = now_us();
        const int32_t rc = drafter_.draft(requests_);
        const uint64_t share = (uint64_t) (now_us() - t0) / requests_.size();
        for (Slot * s : slots) {
            if (s->round.n_max > 0) {
                s->round.counters.t_draft_us += share;
            }
        }
        if (rc != 0) {
            head_failed(rc, "draft");
        }
    }

    void catch_up(const std::vector<Slot *> & slots, const common_batch & verify_batch) override {
        for (Slot * s : slots) {
            if (s->may_draft() && !s->round.must_restore) {
                ScopedTimer timer(s->round.counters.t_draft_us);
                // Queued here, decoded with the next draft's first step.
                if (const int32_t rc = drafter_.accept(s->seq, verify_batch, s->round.first_row, s->round.ids.size() - 1);
                    rc != 0) {
                    head_failed(rc, "catch up");
                }
            }
        }
    }
    void accept(Slot &, size_t) override {}
    size_t queued_rows(const Slot & s) const override { return drafter_.pending_rows(s.seq); }
    size_t padding_rows() const override { return requests_.empty() ? 0 : drafter_.padding_rows(); }

    std::shared_ptr<const DraftSnapshot> save(const Slot & s) const override {
        return std::make_shared<FusedSnapshot>(drafter_.snapshot(s.seq));
    }
    void restore(Slot & s, const DraftSnapshot * snapshot) override {
        const auto * fused = dynamic_cast<const FusedSnapshot *>(snapshot);
        drafter_.restore(s.seq, fused ? fused->value : MtpDrafter::Snapshot{});
    }

    void print_stats(const Counters & c) const override {
        // common_speculative's line, from the engine's own counters.
        const uint64_t passes = c.iters - c.replays;
        std::fprintf(stderr, "draft-mtp (mtp_llm fused driver): #verify passes = %llu, #gen drafts = %llu, "
                             "#acc drafts = %llu, mean acc len = %.2f\n",
                     (unsigned long long) passes, (unsigned long long) c.drafts_generated,
                     (unsigned long long) c.drafts_accepted,
                     passes ? 1.0 + (double) c.drafts_accepted / (double) passes : 0.0);
        std::fflush(stderr);
    }

private:
    MtpDrafter drafter_;
    int32_t n_draft_max_;
    std::vector<MtpDrafter::Request> requests_;  // kept: nothing is allocated per step
    std::vector<MtpDrafter::Sampling> samplings_;
};

}  // namespace

std::unique_ptr<DraftSource> make_fused_head(llama_context * target, llama_context * head, const ContextOptions & opts) {
    return std::make_unique<FusedHead>(target, head, opts);
}

}  // namespace mtp
