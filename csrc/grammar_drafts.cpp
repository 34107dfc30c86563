// Grammar-forced drafts (jump-forward as drafts): where a call's grammar admits exactly one
// continuation for the next characters (a JSON key, punctuation, the rest of an enum value),
// those characters, tokenized, are the draft: no head pass. The target verifies them like
// any draft, so a tokenization it would not choose is simply rejected and output stays the
// target's. Elsewhere the head drafts as usual; the head follows every verified row either way.
#include <algorithm>
#include <memory>

#include "draft_source.hpp"
#include "runtime.hpp"
#include "sampling.h"

namespace mtp {

namespace {

// Characters of forced text looked at per iteration (more than the longest draft takes).
constexpr size_t kMaxForcedBytes = 128;

class GrammarDrafts final : public DraftSource {
public:
    GrammarDrafts(std::unique_ptr<DraftSource> head, const llama_vocab * vocab)
        : head_(std::move(head)), vocab_(vocab) {}

    const char * name() const override { return head_->name(); }
    bool rewinds_reused_prefix() const override { return head_->rewinds_reused_prefix(); }
    bool may_defer_prompt() const override { return head_->may_defer_prompt(); }
    bool reads_every_slot() const override { return head_->reads_every_slot(); }
    void reset(Slot & s) override { head_->reset(s); }
    void keep_prefix(Slot & s, llama_pos n, bool h_valid) override { head_->keep_prefix(s, n, h_valid); }
    void prompt_chunk(Slot & s, const common_batch & chunk, bool defer) override { head_->prompt_chunk(s, chunk, defer); }
    void prompt_done(Slot & s) override { head_->prompt_done(s); }

    void draft(const std::vector<Slot *> & slots, const common_batch & target_batch) override {
        for (Slot * s : slots) {
            Slot::Round & r = s->round;
            r.n_forced = 0;
            if (r.room <= 0 || r.is_replay || !s->call.has_grammar) {
                continue;
            }
            ScopedTimer timer(r.counters.t_draft_us);
            const std::string text = common_sampler_forced_text(s->call.sampler.get(), kMaxForcedBytes);
            if (text.empty()) {
                continue;
            }
            tokens_ = common_tokenize(vocab_, text, /*add_special=*/false, /*parse_special=*/false);
            const size_t n = std::min(tokens_.size(), (size_t) r.room);
            if (n == 0) {
                continue;
            }
            r.draft_tokens.assign(tokens_.begin(), tokens_.begin() + (ptrdiff_t) n);
            r.n_forced = (int32_t) n;
            r.n_max = 0;  // the head does not draft for this slot in this iteration
        }
        head_->draft(slots, target_batch);
    }

    void catch_up(const std::vector<Slot *> & slots, const common_batch & verify_batch) override {
        head_->catch_up(slots, verify_batch);
    }
    void accept(Slot & s, size_t n_accepted) override { head_->accept(s, n_accepted); }
    std::shared_ptr<const DraftSnapshot> save(const Slot & s) const override { return head_->save(s); }
    void restore(Slot & s, const DraftSnapshot * snapshot) override { head_->restore(s, snapshot); }
    void print_stats(const Counters & total) const override { head_->print_stats(total); }

private:
    std::unique_ptr<DraftSource> head_;
    const llama_vocab * vocab_;
    llama_tokens tokens_;  // kept: nothing is allocated per step once it has grown
};

}  // namespace

std::unique_ptr<DraftSource> with_grammar_drafts(std::unique_ptr<DraftSource> head, const llama_vocab * vocab) {
    return std::make_unique<GrammarDrafts>(std::move(head), vocab);
}

}  // namespace mtp
