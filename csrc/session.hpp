// A speculative-decoding session: target context, MTP draft context and
// llama.cpp's draft-mtp state, driven one step at a time.
//
// Ownership: every llama.cpp handle lives in a unique_ptr member; member order
// is teardown order (reverse), so the speculative state and the MTP context,
// which point at the target context, go first. Nothing here touches Python.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "llama-cpp.h"
#include "sampling.h"
#include "speculative.h"
#include "common.h"
#include "counters.hpp"
#include "drafter.hpp"
#include "model.hpp"
#include "options.hpp"
#include "text.hpp"

namespace mtp {

struct TokenOut {
    int32_t id;
    std::string text;  // valid UTF-8; "" while bytes are held back
};

struct StepResult {
    std::vector<TokenOut> tokens;
    bool finished = false;
    std::string finish_reason;  // "eog", "length", "stop"
};

class Session {
public:
    Session(std::shared_ptr<Model> target, std::shared_ptr<Model> draft, const ContextOptions & opts);
    ~Session();

    // Generation protocol: begin() then step() until finished, then end().
    // begin/step/end run without the GIL; one generation at a time.
    void begin(const std::vector<int32_t> & prompt, const GenerateOptions & opts);
    StepResult step();
    void end();
    void cancel() { cancel_requested_.store(true); }
    bool active() const { return active_.load(); }

    Counters stats() const { return total_.snapshot(opts_.n_draft); }
    Counters call_stats() const { return call_.snapshot(active_n_draft_.load(std::memory_order_relaxed)); }
    void reset_stats() { total_.reset(); }
    void print_stats() const;

    const ContextOptions & options() const { return opts_; }
    int32_t n_ctx() const;
    std::string rollback_mode() const;  // "none", "partial", "rs", "checkpoint"
    std::string flash_attn() const;     // "on", "off", or "auto" (llama.cpp decides per device)
    std::string mtp_driver() const;     // "fused" (MtpDrafter), "upstream" (common_speculative) or "none"

private:
    static bool abort_cb(void * data);
    const Model * check_head() const;  // the model holding the MTP head; null for plain decoding
    void create_contexts(const Model * head);
    bool drafting() const { return (drafter_ || spec_) && active_n_draft_.load(std::memory_order_relaxed) > 0; }
    bool checkpoints_target() const { return seq_rm_tgt_ == COMMON_CONTEXT_SEQ_RM_TYPE_FULL; }
    bool checkpoints_head() const { return ctx_dft_ && seq_rm_dft_ == COMMON_CONTEXT_SEQ_RM_TYPE_FULL; }
    void check_deadline();
    void head_failed(int32_t rc, const char * what);
    void decode_or_throw(llama_context * ctx, common_batch & batch, const char * what);
    void record(const Counters & c);
    void process_prompt_chunk();

    // One draft/verify iteration, in phases (each timed into its bucket of `c`).
    void speculative_iteration(StepResult & out);
    void draft(Counters & c);
    void verify(Counters & c);
    std::vector<llama_token> accept(common_sampler_ptr & sampler_before, Counters & c);
    void catch_up_head(size_t n_accepted, Counters & c);
    void restore_checkpoint(std::vector<llama_token> ids, common_sampler_ptr sampler_before, Counters & c);
    void commit(const std::vector<llama_token> & ids, size_t n_accepted, StepResult & out, Counters & c);

    void commit_tokens(const std::vector<llama_token> & ids, StepResult & out);
    void finish(StepResult & out, const std::string & reason);

    std::shared_ptr<Model> target_;
    std::shared_ptr<Model> draft_model_;
    ContextOptions opts_;
    llama_flash_attn_type flash_attn_type_ = LLAMA_FLASH_ATTN_TYPE_AUTO;

    // Declaration order = reverse teardown order.
    llama_context_ptr ctx_tgt_;
    llama_context_ptr ctx_dft_;
    common_speculative_ptr spec_;        // llama.cpp's driver, where the fused one does not apply
    std::unique_ptr<MtpDrafter> drafter_;  // mtp_llm's fused driver
    common_batch batch_;           // target prompt/verify batch, reused: no allocation per step
    common_batch accepted_batch_;  // the verify batch's accepted prefix, for the MTP head's catch-up
    common_params_speculative spec_params_;
    common_context_seq_rm_type seq_rm_tgt_ = COMMON_CONTEXT_SEQ_RM_TYPE_PART;
    common_context_seq_rm_type seq_rm_dft_ = COMMON_CONTEXT_SEQ_RM_TYPE_PART;

    // Current generation.
    std::atomic<bool> active_{false};
    std::atomic<bool> cancel_requested_{false};
    std::atomic<int64_t> deadline_us_{0};
    std::atomic<int32_t> active_n_draft_{0};  // written by begin() without the GIL, read by stats readers
    common_sampler_ptr sampler_;
    common_prompt_checkpoint ckpt_;
    std::vector<llama_token> prompt_;     // prompt tokens still to process (all but the last)
    size_t prompt_done_ = 0;
    llama_tokens context_tokens_;         // tokens in the target context
    llama_token id_last_ = 0;
    int32_t n_past_ = 0;
    llama_tokens draft_tokens_;
    bool replay_pending_ = false;
    int32_t max_tokens_ = 0;
    int32_t produced_ = 0;
    bool prompt_phase_ = false;
    bool finished_ = false;
    int64_t t_begin_us_ = 0;
    bool first_token_seen_ = false;
    TextAssembler text_;
    std::set<llama_token> preserved_tokens_;  // emitted as text (a chat grammar's markup)

    AtomicCounters total_;
    AtomicCounters call_;
};

}  // namespace mtp
