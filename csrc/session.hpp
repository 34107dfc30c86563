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
#include <exception>
#include <map>
#include <memory>
#include <mutex>
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
#include "runtime.hpp"
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

    // Generation protocol, per slot: begin() returns the slot a generation runs in, then
    // step(slot) until finished, then end(slot). The session holds n_parallel slots (one
    // sequence each in both contexts); every step runs one round over all running slots
    // (a prompt chunk each for slots still reading their prompt, then one draft/verify
    // iteration that drafts and verifies all the others in shared batches), driven by
    // whichever caller steps first while the others wait. All of it runs without the GIL.
    // `call`: the caller's id for this generation (0 = none): end_call(call) ends it even
    // when the caller never saw the slot (interrupted right after begin returned).
    int32_t begin(const std::vector<int32_t> & prompt, const GenerateOptions & opts, uint64_t call = 0);
    StepResult step(int32_t slot);
    // Throws Error(RpcLost) when a connection to an RPC server of the models was lost.
    void check_rpc() const;
    void end(int32_t slot);
    void end_call(uint64_t call);  // end() of the slot running generation `call`, if any
    void cancel();              // every running generation
    void cancel(int32_t slot);  // one of them
    bool active() const { return n_running_.load() > 0; }
    int32_t n_parallel() const { return (int32_t) slots_.size(); }

    Counters stats() const { return total_.snapshot(longest_draft(opts_)); }
    Counters call_stats(int32_t slot) const;  // slot < 0: the latest begun
    void reset_stats() { total_.reset(); }
    void print_stats() const;
    ControllerEstimates draft_controller() const { return controller_.estimates(); }
    uint64_t prompt_cache_bytes() const { return saved_bytes_.load(); }  // saved states of other conversations

    const ContextOptions & options() const { return opts_; }
    int32_t n_ctx() const;       // all slots together
    int32_t n_ctx_slot() const;  // one generation's context
    std::string rollback_mode() const;  // "none", "partial", "rs", "checkpoint"
    std::string flash_attn() const;     // "on", "off", or "auto" (llama.cpp decides per device)
    std::string mtp_driver() const;     // "fused" (MtpDrafter), "upstream" (common_speculative) or "none"
    uint64_t cache_bytes() const;       // both contexts' caches (KV cells, recurrent state), all slots
    // Where each context runs: "target" (and "mtp" with a head) -> the devices holding its
    // layers' weights and its KV cache, in ggml's device order.
    std::map<std::string, std::vector<std::string>> devices() const;

private:
    // One generation's state: sequence `seq` of both contexts.
    struct Slot {
        explicit Slot(llama_seq_id seq) : seq(seq) {}
        const llama_seq_id seq;

        // Between begin() and end() (guarded by mu_).
        bool in_use = false;
        int32_t rounds_ready = 0;  // rounds whose output the caller has not taken yet
        StepResult ready;          // their output, joined
        std::exception_ptr error;  // this generation failed in a round another caller drove
        uint64_t last_used = 0;    // begin() order, for picking a slot
        uint64_t call_id = 0;      // the caller's id of the running generation

        std::atomic<bool> cancel_requested{false};
        std::atomic<int64_t> deadline_us{0};
        std::atomic<int32_t> active_n_draft{0};  // longest draft of this call; read by stats readers
        bool auto_draft = false;          // this call's lengths come from the session's controller
        bool cache_this_call = false;     // this call's cache_prompt
        bool head_follows = false;        // this call feeds the head (it may draft)
        bool head_followed = false;       // the previous call did
        bool cache_valid = false;         // the contexts hold exactly context_tokens (a whole step completed)
        size_t reused = 0;                // prompt positions this call took from the contexts
        bool head_defers_prompt = false;  // the head keeps the prompt's last rows instead of decoding it
        bool head_stale = false;          // llama.cpp's driver skipped the head's catch-up (plain stretch)
        struct Observation {
            int32_t drafted, accepted;
            int64_t us, head_us;
            bool resumed;
        };
        std::optional<Observation> pending_observation;  // a drafting pass waiting for its replay
        common_sampler_ptr sampler;
        common_prompt_checkpoint ckpt;
        std::vector<llama_token> prompt;  // prompt tokens still to process (all but the last)
        size_t prompt_done = 0;
        llama_tokens context_tokens;      // tokens in the target context
        llama_token id_last = 0;
        int32_t n_past = 0;
        llama_tokens draft_tokens;
        bool replay_pending = false;
        int32_t max_tokens = 0;
        int32_t produced = 0;
        bool prompt_phase = false;
        bool finished = false;
        int64_t t_begin_us = 0;
        bool first_token_seen = false;
        TextAssembler text;
        std::set<llama_token> preserved_tokens;  // emitted as text (a chat grammar's markup)

        // This round's iteration.
        bool is_replay = false;
        bool resumed = false;
        int32_t n_max = 0;
        int32_t first_row = 0;  // its rows in the verify batch
        std::vector<llama_token> ids;
        common_sampler_ptr sampler_before;
        Counters round;

        AtomicCounters call;

        bool wants_stop() const;
    };

    static bool abort_cb(void * data);
    const Model * check_head() const;  // the model holding the MTP head; null for plain decoding
    void create_contexts(const Model * head);
    Slot & slot_at(int32_t slot) const;
    Slot & pick_slot(const std::vector<int32_t> & prompt);
    void release(Slot & s);  // end of a generation (mu_ held); what the contexts hold stays cached
    void prepare(Slot & s, const std::vector<int32_t> & prompt, const GenerateOptions & g);
    // This call may draft (a head, and a draft length above 0 or "auto").
    bool drafting(const Slot & s) const { return (drafter_ || spec_) && s.active_n_draft.load(std::memory_order_relaxed) > 0; }
    int32_t draft_room(const Slot & s) const;  // the longest draft the context and max_tokens leave room for
    bool checkpoints_target() const { return seq_rm_tgt_ == COMMON_CONTEXT_SEQ_RM_TYPE_FULL; }
    bool checkpoints_head() const { return ctx_dft_ && seq_rm_dft_ == COMMON_CONTEXT_SEQ_RM_TYPE_FULL; }
    // llama.cpp's driver may leave a sequence's head behind in plain stretches (one slot only:
    // its catch-up reads the target's last batch, which holds every slot's rows).
    bool head_may_lag() const { return slots_.size() == 1; }
    // The head reads this slot's rows: it may draft, or llama.cpp's driver keeps every
    // sequence's head in step (several slots).
    bool feeds_head(const Slot & s) const { return drafting(s) || (spec_ && !head_may_lag()); }
    static void check_deadline(const Slot & s);
    void head_failed(int32_t rc, const char * what);
    void decode_or_throw(llama_context * ctx, common_batch & batch, const char * what);
    void synchronize_contexts();
    // `shared_batch_counted`: another slot of this round already counted its verify decode.
    void record(Slot & s, const Counters & c, bool shared_batch_counted = false);
    void process_prompt_chunk(Slot & s);
    void clear_contexts(Slot & s);
    size_t reuse_prefix(Slot & s, const std::vector<int32_t> & prompt);
    void forget_upstream_head(Slot & s);
    // Saved states of other conversations (prompt cache, LRU bounded by cache_size_mb).
    struct SavedState {
        llama_tokens tokens;  // what the contexts held: exactly these positions
        std::vector<uint8_t> target, head;
        MtpDrafter::Snapshot drafter;
        size_t bytes() const { return tokens.size() * sizeof(llama_token) + target.size() + head.size() + drafter.bytes(); }
    };
    bool target_rolls_back() const { return seq_rm_tgt_ == COMMON_CONTEXT_SEQ_RM_TYPE_PART; }
    size_t usable_prefix(const llama_tokens & held, const std::vector<int32_t> & prompt) const;
    size_t cached_prefix(const Slot & s, const std::vector<int32_t> & prompt) const;
    void save_state(Slot & s);
    void restore_state(Slot & s, const SavedState & state);
    void pick_saved_state(Slot & s, const std::vector<int32_t> & prompt);

    // One round (mu_ held): each participating slot's output goes to its `ready`, its
    // failure to its `error`; nothing is thrown.
    void run_round();
    void fail_slot(Slot & s, std::exception_ptr e);
    void fail_round(std::vector<Slot *> & slots, std::exception_ptr e);

    // One draft/verify iteration over `slots`, in phases; a slot that fails leaves `slots`.
    void speculative_iteration(std::vector<Slot *> & slots);
    void finish_iteration(Slot & s, int64_t us, bool batch_counted);
    void draft(std::vector<Slot *> & slots);
    void draft_upstream(std::vector<Slot *> & slots);
    void resume_upstream_head(Slot & s);
    void verify(std::vector<Slot *> & slots);
    void accept(Slot & s);
    void catch_up_head(std::vector<Slot *> & slots);
    void restore_checkpoint(Slot & s);
    void commit(Slot & s, size_t n_accepted, StepResult & out);

    void commit_tokens(Slot & s, const std::vector<llama_token> & ids, StepResult & out);
    void finish(Slot & s, StepResult & out, const std::string & reason);

    std::shared_ptr<Model> target_;
    std::shared_ptr<Model> draft_model_;
    const Model * head_ = nullptr;  // target_ or draft_model_ when an MTP context exists
    ContextOptions opts_;
    llama_flash_attn_type flash_attn_type_ = LLAMA_FLASH_ATTN_TYPE_AUTO;

    // Declaration order = reverse teardown order.
    int32_t n_threads_ = 1, n_threads_batch_ = 1;  // the compute threads each round leases
    llama_context_ptr ctx_tgt_;
    llama_context_ptr ctx_dft_;
    common_speculative_ptr spec_;        // llama.cpp's driver, where the fused one does not apply
    std::unique_ptr<MtpDrafter> drafter_;  // mtp_llm's fused driver
    common_batch batch_;           // target prompt/verify batch, reused: no allocation per step
    common_batch accepted_batch_;  // the verify batch's accepted prefix, for the MTP head's catch-up
    common_params_speculative spec_params_;
    common_context_seq_rm_type seq_rm_tgt_ = COMMON_CONTEXT_SEQ_RM_TYPE_PART;
    common_context_seq_rm_type seq_rm_dft_ = COMMON_CONTEXT_SEQ_RM_TYPE_PART;

    // Serialises every use of the contexts: begin's cache work, each round, end.
    mutable std::mutex mu_;
    std::vector<std::unique_ptr<Slot>> slots_;
    std::vector<Slot *> round_slots_;  // the slots of the decode running now (read by abort_cb)
    // A round's scratch, kept to allocate nothing per step.
    std::vector<Slot *> round_prompting_, round_generating_;
    std::vector<MtpDrafter::Request> draft_requests_;
    std::vector<int> sample_rows_;
    std::atomic<int32_t> n_running_{0};
    std::atomic<int32_t> last_slot_{0};
    uint64_t begin_count_ = 0;
    std::list<SavedState> saved_;  // most recent first
    std::atomic<uint64_t> saved_bytes_{0};

    // One draft length per round for every slot on "auto": the costs it weighs are the
    // round's (all running slots'), and it outlives calls: what it learns persists.
    DraftController controller_;

    AtomicCounters total_;
};

}  // namespace mtp
