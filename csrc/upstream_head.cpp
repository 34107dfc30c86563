// llama.cpp's draft-mtp driver (common_speculative) as a draft source: chained heads and
// caches that roll back only through checkpoints.
#include <memory>

#include "draft_source.hpp"
#include "drafter.hpp"
#include "errors.hpp"
#include "log.h"
#include "runtime.hpp"
#include "speculative.h"

namespace mtp {

namespace {

class UpstreamHead final : public DraftSource {
public:
    UpstreamHead(llama_context * target, llama_context * head, Rollback rollback, const ContextOptions & opts)
        : target_(target), head_(head), rollback_(rollback), accepted_batch_(target),
          stale_((size_t) opts.n_parallel, false), samplings_((size_t) opts.n_parallel),
          n_vocab_(llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(head)))),
          head_may_lag_(opts.n_parallel == 1) {
        params_.types = {COMMON_SPECULATIVE_TYPE_DRAFT_MTP};
        params_.draft.n_max = longest_draft(opts);
        params_.draft.n_min = 0;
        params_.draft.p_min = opts.p_min;
        params_.draft.ctx_tgt = target;
        params_.draft.ctx_dft = head;
        spec_.reset(common_speculative_init(params_, (uint32_t) opts.n_parallel));
        if (!spec_) {
            fail(ErrorKind::MissingMtpHead, with_log("llama.cpp could not initialise draft-mtp speculation"));
        }
    }

    const char * name() const override { return "upstream"; }
    // The driver may leave a sequence's head behind in plain stretches with one slot only:
    // its catch-up reads the target's last batch, which holds every slot's rows.
    bool may_defer_prompt() const override { return head_may_lag_; }
    bool reads_every_slot() const override { return !head_may_lag_; }

    void reset(Slot & s) override { stale_[s.seq] = false; }
    // The driver keeps its own carry-over state, which a reused or restored prefix does not
    // match: the head's cache of the sequence goes. One slot: the head starts afresh from
    // the target's last batch when it next drafts. Several slots: it reads every slot's
    // rows from here on (an empty sequence may start at any position), so it drafts from
    // what it has seen since; output is the target's either way.
    void keep_prefix(Slot & s, llama_pos, bool) override { forget(s); }

    void prompt_chunk(Slot & s, const common_batch & chunk, bool defer) override {
        if (defer || stale_[s.seq]) {
            stale_[s.seq] = true;
        } else if (!common_speculative_process(spec_.get(), chunk)) {
            head_failed(-1, "process the prompt");
        }
    }
    void prompt_done(Slot & s) override {
        if (!stale_[s.seq]) {
            common_speculative_begin(spec_.get(), s.seq, s.cache.tokens);
        }
    }

    void draft(const std::vector<Slot *> & slots, const common_batch & target_batch) override {
        size_t n_drafting = 0;
        for (Slot * s : slots) {
            if (s->round.n_max == 0) {
                continue;
            }
            if (stale_[s->seq]) {
                ScopedTimer timer(s->round.counters.t_draft_us);
                resume(*s, target_batch);
                s->round.resumed = true;
            }
            if (rollback_.checkpoints_head()) {
                ScopedTimer timer(s->round.counters.t_ckpt_us);
                s->round.ckpt.update_dft(head_, s->seq, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
            }
            common_speculative_draft_params & dp = common_speculative_get_draft_params(spec_.get(), s->seq);
            dp.drafting = true;
            dp.n_max = s->round.n_max;
            dp.pos0 = s->cache.n_past;
            dp.id_last = s->cache.id_last;
            dp.prompt = &s->cache.tokens;
            dp.result = &s->round.draft_tokens;
            dp.pick = nullptr;
            s->round.draft_q.clear();
            if (s->call.draft_temp > 0.0f) {
                // Drafts sampled from the head (patch 0025's hook), as the fused driver samples them.
                HeadSampling & sampling = samplings_[s->seq];
                sampling = {s->call.draft_temp, &s->call.rng, &s->round.draft_q, s->call.draft_top_k,
                            s->call.draft_top_p, s->call.draft_min_p};
                dp.pick = [this, &sampling](llama_context * head, int32_t row) {
                    // A backend sampler leaves the head's top candidates only: q covers those.
                    const llama_token * ids = llama_get_sampled_candidates_ith(head, row);
                    const int32_t n = ids ? (int32_t) llama_get_sampled_logits_count_ith(head, row) : n_vocab_;
                    const llama_token id = sampler_.sample(llama_get_logits_ith(head, row), ids, n, n_vocab_, sampling);
                    if (id < 0) {
                        sampling.q->pop_back();  // truncation kept nothing: the draft ends
                    }
                    return id < 0 ? LLAMA_TOKEN_NULL : id;
                };
            }
            ++n_drafting;
        }
        if (n_drafting == 0) {
            return;
        }
        const int64_t t0 = now_us();
        common_speculative_draft(spec_.get());
        const uint64_t share = (uint64_t) (now_us() - t0) / n_drafting;
        for (Slot * s : slots) {
            if (s->round.n_max == 0) {
                continue;
            }
            s->round.counters.t_draft_us += share;
            if ((int32_t) s->round.draft_tokens.size() > s->round.n_max) {
                s->round.draft_tokens.resize(s->round.n_max);
            }
            if (s->round.draft_q.size() > s->round.draft_tokens.size()) {
                s->round.draft_q.resize(s->round.draft_tokens.size());
            }
            // The head's draft-time rows go (and its checkpointed state comes back).
            ScopedTimer timer(rollback_.checkpoints_head() ? s->round.counters.t_ckpt_us : s->round.counters.t_draft_us);
            if (rollback_.checkpoints_head()) {
                s->round.ckpt.load_dft(head_, s->seq, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
            }
            const llama_pos target_end = llama_memory_seq_pos_max(llama_get_memory(target_), s->seq);
            llama_memory_seq_rm(llama_get_memory(head_), s->seq, target_end + 1, -1);
        }
    }

    void catch_up(const std::vector<Slot *> & slots, const common_batch & verify_batch) override {
        if (!head_may_lag_) {
            // The driver reads each row's hidden state by its index in the target's batch:
            // with several slots it catches up on the whole verify batch, and the rejected
            // rows leave the head's cache at commit.
            const int64_t t0 = now_us();
            const bool ok = common_speculative_process(spec_.get(), verify_batch);
            const uint64_t us = (uint64_t) (now_us() - t0);
            for (Slot * s : slots) {
                s->round.counters.t_draft_us += us * (s->round.draft_tokens.size() + 1) / (uint64_t) verify_batch.size();
            }
            if (!ok) {
                head_failed(-1, "process the verify batch");
            }
            return;
        }
        if (slots.empty()) {
            return;
        }
        Slot & s = *slots.front();
        if (!s.may_draft() || s.round.must_restore) {
            return;
        }
        ScopedTimer timer(s.round.counters.t_draft_us);
        if (s.round.draft_tokens.empty() || stale_[s.seq]) {
            stale_[s.seq] = true;  // caught up only when drafting resumes
            return;
        }
        // [id_last, accepted drafts] only: rows past the first rejection would be trimmed
        // from the head's cache right after.
        const size_t n_accepted = s.round.ids.size() - 1;
        const common_batch * rows = &verify_batch;
        if (n_accepted < s.round.draft_tokens.size()) {
            accepted_batch_.clear();
            for (size_t i = 0; i <= n_accepted; ++i) {
                accepted_batch_.add(verify_batch.tokens[i].id, verify_batch.tokens[i].pos[0], s.seq, true);
            }
            rows = &accepted_batch_;
        }
        if (!common_speculative_process(spec_.get(), *rows)) {
            head_failed(-1, "process the verify batch");
        }
    }

    // A head that lagged resumes from the target's last decode: it queues no rows.
    size_t queued_rows(const Slot &) const override { return 0; }
    size_t padding_rows() const override { return 0; }

    void accept(Slot & s, size_t n_accepted) override {
        if (!stale_[s.seq]) {
            common_speculative_accept(spec_.get(), s.seq, (uint16_t) n_accepted);
        }
    }

    std::shared_ptr<const DraftSnapshot> save(const Slot &) const override { return nullptr; }
    void restore(Slot & s, const DraftSnapshot *) override { forget(s); }

    void print_stats(const Counters &) const override {
        const int thold = common_log_get_verbosity_thold();
        common_log_set_verbosity_thold(LOG_LEVEL_TRACE);
        common_speculative_print_stats(spec_.get());
        common_log_flush(common_log_main());
        common_log_set_verbosity_thold(thold);
        std::fflush(stdout);
        std::fflush(stderr);
    }

private:
    void forget(Slot & s) {
        llama_memory_seq_rm(llama_get_memory(head_), s.seq, -1, -1);
        stale_[s.seq] = head_may_lag_;
    }
    // The driver skipped the head's catch-up while the target decoded alone (one slot): its
    // cache has a gap it cannot decode across. Start it afresh from the target's last decode.
    void resume(Slot & s, const common_batch & target_batch) {
        llama_memory_seq_rm(llama_get_memory(head_), s.seq, -1, -1);
        if (!common_speculative_process(spec_.get(), target_batch)) {
            head_failed(-1, "catch up after plain decoding");
        }
        stale_[s.seq] = false;
    }

    llama_context * target_;
    llama_context * head_;
    Rollback rollback_;
    common_params_speculative params_;
    common_speculative_ptr spec_;
    common_batch accepted_batch_;  // the verify batch's accepted prefix (one slot)
    std::vector<bool> stale_;      // per sequence: the head skipped rows (plain stretch)
    std::vector<HeadSampling> samplings_;  // per sequence: how this round's drafts are sampled
    HeadSampler sampler_;
    const int32_t n_vocab_;
    const bool head_may_lag_;
};

}  // namespace

std::unique_ptr<DraftSource> make_upstream_head(llama_context * target, llama_context * head, Rollback rollback,
                                                const ContextOptions & opts) {
    return std::make_unique<UpstreamHead>(target, head, rollback, opts);
}

}  // namespace mtp
