// A speculative-decoding session: target context, MTP draft context and
// llama.cpp's draft-mtp state, driven one step at a time.
//
// Ownership: every llama.cpp handle lives in a unique_ptr member; member order
// is teardown order (reverse), so the speculative state and the MTP context,
// which point at the target context, go first. Nothing here touches Python.
#pragma once

#include <atomic>
#include <list>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "llama-cpp.h"
#include "sampling.h"
#include "speculative.h"
#include "common.h"
#include "counters.hpp"
#include "draft_controller.hpp"
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
    // Throws Error(RpcLost) when a connection to an RPC server of the models was lost.
    void check_rpc() const;
    void end();
    void cancel() { cancel_requested_.store(true); }
    bool active() const { return active_.load(); }

    Counters stats() const { return total_.snapshot(longest_draft(opts_)); }
    Counters call_stats() const { return call_.snapshot(active_n_draft_.load(std::memory_order_relaxed)); }
    void reset_stats() { total_.reset(); }
    void print_stats() const;
    ControllerEstimates draft_controller() const { return controller_.estimates(); }
    uint64_t prompt_cache_bytes() const { return saved_bytes_.load(); }  // saved states of other conversations

    const ContextOptions & options() const { return opts_; }
    int32_t n_ctx() const;
    std::string rollback_mode() const;  // "none", "partial", "rs", "checkpoint"
    std::string flash_attn() const;     // "on", "off", or "auto" (llama.cpp decides per device)
    std::string mtp_driver() const;     // "fused" (MtpDrafter), "upstream" (common_speculative) or "none"
    // Where each context runs: "target" (and "mtp" with a head) -> the devices holding its
    // layers' weights and its KV cache, in ggml's device order.
    std::map<std::string, std::vector<std::string>> devices() const;

private:
    static bool abort_cb(void * data);
    const Model * check_head() const;  // the model holding the MTP head; null for plain decoding
    void create_contexts(const Model * head);
    // This call may draft (a head, and a draft length above 0 or "auto").
    bool drafting() const { return (drafter_ || spec_) && active_n_draft_.load(std::memory_order_relaxed) > 0; }
    int32_t draft_room() const;  // the longest draft the context and max_tokens leave room for
    bool checkpoints_target() const { return seq_rm_tgt_ == COMMON_CONTEXT_SEQ_RM_TYPE_FULL; }
    bool checkpoints_head() const { return ctx_dft_ && seq_rm_dft_ == COMMON_CONTEXT_SEQ_RM_TYPE_FULL; }
    void check_deadline();
    void head_failed(int32_t rc, const char * what);
    void decode_or_throw(llama_context * ctx, common_batch & batch, const char * what);
    void record(const Counters & c);
    void process_prompt_chunk();
    void clear_contexts();
    size_t reuse_prefix(const std::vector<int32_t> & prompt);
    // Saved states of other conversations (prompt cache, LRU bounded by cache_size_mb).
    struct SavedState {
        llama_tokens tokens;  // what the contexts held: exactly these positions
        std::vector<uint8_t> target, head;
        MtpDrafter::Snapshot drafter;
        size_t bytes() const { return tokens.size() * sizeof(llama_token) + target.size() + head.size() + drafter.bytes(); }
    };
    bool target_rolls_back() const { return seq_rm_tgt_ == COMMON_CONTEXT_SEQ_RM_TYPE_PART; }
    size_t usable_prefix(const llama_tokens & held, const std::vector<int32_t> & prompt) const;
    void save_state();
    void restore_state(const SavedState & state);
    void pick_saved_state(const std::vector<int32_t> & prompt);
    StepResult step_once();

    // One draft/verify iteration, in phases (each timed into its bucket of `c`).
    void speculative_iteration(StepResult & out);
    void draft(Counters & c, bool & resumed);
    void resume_upstream_head();
    void verify(Counters & c);
    std::vector<llama_token> accept(common_sampler_ptr & sampler_before, Counters & c);
    void catch_up_head(size_t n_accepted, Counters & c);
    void restore_checkpoint(std::vector<llama_token> ids, common_sampler_ptr sampler_before, Counters & c);
    void commit(const std::vector<llama_token> & ids, size_t n_accepted, StepResult & out, Counters & c);

    void commit_tokens(const std::vector<llama_token> & ids, StepResult & out);
    void finish(StepResult & out, const std::string & reason);

    std::shared_ptr<Model> target_;
    std::shared_ptr<Model> draft_model_;
    const Model * head_ = nullptr;  // target_ or draft_model_ when an MTP context exists
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
    std::atomic<int32_t> active_n_draft_{0};  // longest draft of this call; written by begin() without the GIL, read by stats readers
    bool auto_draft_ = false;                 // this call's lengths come from controller_
    bool cache_this_call_ = false;            // this call's cache_prompt
    bool head_follows_ = false;               // this call feeds the head (it may draft)
    bool head_followed_ = false;              // the previous call did
    bool cache_valid_ = false;                // the contexts hold exactly context_tokens_ (a whole step completed)
    size_t reused_ = 0;                       // prompt positions this call took from the contexts
    std::list<SavedState> saved_;             // most recent first
    std::atomic<uint64_t> saved_bytes_{0};
    bool head_defers_prompt_ = false;         // the head keeps the prompt's last rows instead of decoding it
    bool head_stale_ = false;                 // llama.cpp's driver skipped the head's catch-up (plain stretch)
    struct Observation {
        int32_t drafted, accepted;
        int64_t us, head_us;
        bool resumed;
    };
    std::optional<Observation> pending_observation_;  // a drafting pass waiting for its replay
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

    DraftController controller_;  // outlives calls: what it learns persists

    AtomicCounters total_;
    AtomicCounters call_;
};

}  // namespace mtp
