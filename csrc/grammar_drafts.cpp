// Grammar-aware drafting. Where a call's grammar admits exactly one continuation for the
// next characters (a JSON key, punctuation, the rest of an enum value), those characters,
// tokenized as the target writes them (ForcedTokenizer), are the draft: no head pass
// (jump-forward as drafts). Elsewhere the head drafts among the tokens the grammar allows,
// and text the grammar forces after a drafted token ends the draft (MtpDrafter). The target
// verifies every draft as usual, so a tokenization it would not choose is simply rejected
// and output stays the target's; the head follows every verified row either way.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "draft_source.hpp"
#include "runtime.hpp"
#include "sampling.h"

namespace mtp {

namespace {

class GrammarDrafts final : public DraftSource {
public:
    GrammarDrafts(std::unique_ptr<DraftSource> head, const llama_vocab * vocab)
        : head_(std::move(head)), tokenizer_(vocab), vocab_(vocab) {
        if (const char * path = std::getenv("MTP_LLM_FORCED_TRACE"); path != nullptr && *path != '\0') {
            trace_.reset(std::fopen(path, "a"));
        }
    }

    const char * name() const override { return head_->name(); }
    bool may_defer_prompt() const override { return head_->may_defer_prompt(); }
    bool reads_every_slot() const override { return head_->reads_every_slot(); }
    size_t queued_rows(const Slot & s) const override { return head_->queued_rows(s); }
    size_t padding_rows() const override { return head_->padding_rows(); }
    void reset(Slot & s) override { head_->reset(s); }
    void keep_prefix(Slot & s, llama_pos n, bool h_valid) override { head_->keep_prefix(s, n, h_valid); }
    void prompt_chunk(Slot & s, const common_batch & chunk, bool defer) override { head_->prompt_chunk(s, chunk, defer); }
    void prompt_done(Slot & s) override { head_->prompt_done(s); }

    void draft(const std::vector<Slot *> & slots, const common_batch & target_batch) override {
        for (Slot * s : slots) {
            Slot::Round & r = s->round;
            r.n_forced = 0;
            r.grammar.clear();
            if (r.forced_room <= 0 || r.is_replay || !s->call.has_grammar) {
                continue;
            }
            ScopedTimer timer(r.counters.t_draft_us);
            const std::string text = common_sampler_forced_text(s->call.sampler.get(), kMaxForcedBytes);
            if (text.empty()) {
                if (r.n_max > 0) {
                    r.grammar.reset(s->call.sampler.get(), &tokenizer_, s->cache.id_last);  // the head drafts what the grammar allows
                    if (head_accepted_ < kTailPays * head_drafted_) {
                        r.forced_room = std::min(r.forced_room, r.n_max);  // no forced tail past the head's own length
                    }
                }
                continue;
            }
            r.draft_tokens.clear();
            const size_t n = tokenizer_.tokenize(text, s->cache.id_last, (size_t) r.forced_room, r.draft_tokens);
            if (n == 0) {
                continue;
            }
            r.n_forced = (int32_t) n;
            r.n_max = 0;  // the head does not draft for this slot in this iteration
        }
        head_->draft(slots, target_batch);
    }

    void catch_up(const std::vector<Slot *> & slots, const common_batch & verify_batch) override {
        head_->catch_up(slots, verify_batch);
    }
    void accept(Slot & s, size_t n_accepted) override {
        const Slot::Round & r = s.round;
        if (r.grammar && !r.is_replay && r.draft_tokens.size() > (size_t) r.n_forced) {
            head_accepted_ = kHeadMemory * head_accepted_ + (r.ids.size() > 1 ? 1.0 : 0.0);
            head_drafted_ = kHeadMemory * head_drafted_ + 1.0;
        }
        if (s.round.n_forced > 0 && !s.round.is_replay) {
            if (trace_) {
                write_trace(s);
            }
            tokenizer_.learn(s.cache.id_last, s.round.draft_tokens, (size_t) s.round.n_forced, s.round.ids);
        }
        head_->accept(s, n_accepted);
    }
    std::shared_ptr<const DraftSnapshot> save(const Slot & s) const override { return head_->save(s); }
    void restore(Slot & s, const DraftSnapshot * snapshot) override { head_->restore(s, snapshot); }
    void print_stats(const Counters & total) const override { head_->print_stats(total); }

private:
    // MTP_LLM_FORCED_TRACE=path: each pass with forced drafts as `prev|draft|draft|... => ids|...`
    // (pieces, JSON-escaped quotes left as they are): which spellings the target rejects.
    void write_trace(const Slot & s) {
        const Slot::Round & r = s.round;
        std::string line = common_token_to_piece(vocab_, s.cache.id_last, false) + " ||";
        for (size_t i = 0; i < r.draft_tokens.size(); ++i) {
            line += (i + (size_t) r.n_forced == r.draft_tokens.size() ? " ## " : " | ") +
                    common_token_to_piece(vocab_, r.draft_tokens[i], false);
        }
        line += " => ";
        for (const llama_token id : r.ids) {
            line += common_token_to_piece(vocab_, id, false) + " | ";
        }
        for (char & c : line) {
            c = c == '\n' ? ' ' : c;
        }
        std::fprintf(trace_.get(), "%zu/%zu %s\n", r.ids.size() - 1, r.draft_tokens.size(), line.c_str());
        std::fflush(trace_.get());  // readable while the session lives (a trace is for watching)
    }

    // A forced tail after a head draft (the grammar's text once the head has chosen, say, where a number
    // ends) commits only if that draft is accepted, and each of its tokens is a verify row: 0.15-0.2 of a
    // one-row pass on the CPUs measured (docs/performance.md). So it is drafted only while the head's
    // drafts under the grammar are accepted often enough (decayed counts; a prior of one half, worth one).
    static constexpr double kTailPays = 0.3;
    static constexpr double kHeadMemory = 0.9;
    double head_accepted_ = 0.5;
    double head_drafted_ = 1.0;
    std::unique_ptr<DraftSource> head_;
    ForcedTokenizer tokenizer_;
    const llama_vocab * vocab_;
    std::unique_ptr<std::FILE, int (*)(std::FILE *)> trace_{nullptr, &std::fclose};
};

}  // namespace

std::unique_ptr<DraftSource> with_grammar_drafts(std::unique_ptr<DraftSource> head, const llama_vocab * vocab) {
    return std::make_unique<GrammarDrafts>(std::move(head), vocab);
}

}  // namespace mtp
