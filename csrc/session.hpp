// A speculative-decoding session: target context, MTP draft context and
// llama.cpp's draft-mtp state, driven one step at a time.
//
// Ownership: every llama.cpp handle lives in a unique_ptr member; member order
// is teardown order (reverse), so the speculative state and the MTP context,
// which point at the target context, go first. Nothing here touches Python.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "llama-cpp.h"
#include "common.h"
#include "counters.hpp"
#include "draft_controller.hpp"
#include "draft_source.hpp"
#include "model.hpp"
#include "options.hpp"
#include "padding.hpp"
#include "prompt_cache.hpp"
#include "runtime.hpp"
#include "slot.hpp"
#include "target_distribution.hpp"
#include "thread_controller.hpp"

namespace mtp {

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
    uint64_t prompt_cache_bytes() const { return saved_.bytes(); }  // saved states of other conversations

    const ContextOptions & options() const { return opts_; }
    int32_t n_ctx() const;       // all slots together
    int32_t n_ctx_slot() const;  // one generation's context
    std::string rollback_mode() const;  // "none", "partial", "rs", "checkpoint"
    std::string flash_attn() const;     // "on", "off", or "auto" (llama.cpp decides per device)
    int32_t n_threads() const { return n_threads_; }  // compute threads of a decode (n_threads unset: all cores)
    std::string mtp_driver() const;     // the draft source: "fused", "upstream" or "none"
    int32_t draft_vocab_size() const;   // tokens the MTP head scores (a trimmed head: fewer than n_vocab); 0 without one
    uint64_t cache_bytes() const;       // both contexts' caches (KV cells, recurrent state), all slots
    // Where each context runs: "target" (and "mtp" with a head) -> the devices holding its
    // layers' weights and its KV cache, in ggml's device order.
    std::map<std::string, std::vector<std::string>> devices() const;

private:
    static bool abort_cb(void * data);
    void create_contexts(const Model * head);
    Slot & slot_at(int32_t slot) const;
    struct SlotChoice {
        Slot * slot;       // the slot the call runs in
        Slot * copy_from;  // another free slot whose state the call starts from (its prefix is longer)
    };
    SlotChoice pick_slot(const std::vector<int32_t> & prompt, bool cache_prompt);
    void release(Slot & s);  // end of a generation (mu_ held); what the contexts hold stays cached
    void prepare(Slot & s, const std::vector<int32_t> & prompt, const GenerateOptions & g, Slot * copy_from);
    // This call may draft (a head, and a draft length above 0 or "auto").
    bool drafting(const Slot & s) const { return source_ && s.may_draft(); }
    // The head reads this slot's rows: it may draft, or the source reads every slot's.
    bool feeds_head(const Slot & s) const { return drafting(s) || (source_ && source_->reads_every_slot()); }
    // The longest draft the context and max_tokens leave room for, at most `longest`.
    int32_t draft_room(const Slot & s, int32_t longest) const;
    bool checkpoints_target() const { return rollback_.checkpoints_target(); }
    bool target_rolls_back() const { return rollback_.target == COMMON_CONTEXT_SEQ_RM_TYPE_PART; }
    static void check_deadline(const Slot & s);
    void decode_or_throw(llama_context * ctx, common_batch & batch, const char * what);
    void synchronize_contexts();
    // `shared_batch_counted`: another slot of this round already counted its verify decode.
    void record(Slot & s, const Counters & c, bool shared_batch_counted = false);
    void process_prompt_chunk(Slot & s);
    void clear_contexts(Slot & s);
    size_t reuse_prefix(Slot & s, const std::vector<int32_t> & prompt);

    // The prompt cache (prompt_cache.hpp) around this session's contexts.
    size_t usable_prefix(const llama_tokens & held, const std::vector<int32_t> & prompt) const;
    size_t cached_prefix(const Slot & s, const std::vector<int32_t> & prompt) const;
    std::optional<PromptCache::Entry> capture_state(Slot & s);  // nothing where uncommitted rows cannot go
    void save_state(Slot & s);
    void copy_state(Slot & from, Slot & to);
    void restore_state(Slot & s, const PromptCache::Entry & state);
    void pick_saved_state(Slot & s, const std::vector<int32_t> & prompt);

    // One round (mu_ held): each participating slot's output goes to its `ready`, its
    // failure to its `error`; nothing is thrown.
    void run_round();
    void fail_slot(Slot & s, std::exception_ptr e);
    void observe_round_cost(size_t streams);  // the round's time, for the draft-length controller
    void fail_round(std::vector<Slot *> & slots, std::exception_ptr e);

    // One draft/verify iteration over `slots`, in phases (iteration.cpp); a slot that
    // fails leaves `slots`.
    void speculative_iteration(std::vector<Slot *> & slots);
    void finish_iteration(Slot & s, int64_t us, bool batch_counted);
    void draft(std::vector<Slot *> & slots);
    void checkpoint_targets(const std::vector<Slot *> & slots);
    void verify(std::vector<Slot *> & slots);
    void sample(Slot & s);
    std::vector<llama_token> sample_by_rejection(Slot & s);
    std::vector<llama_token> replay_decided(Slot & s);
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
    int32_t longest_forced_ = 0;  // the longest draft of grammar-forced tokens (kMaxForcedDrafts where it fits)
    llama_context_ptr ctx_tgt_;
    llama_context_ptr ctx_dft_;
    std::unique_ptr<DraftSource> source_;  // null for plain decoding
    common_batch batch_;  // target prompt/verify batch, reused: no allocation per step
    Rollback rollback_;

    // Serialises every use of the contexts: begin's cache work, each round, end.
    mutable std::mutex mu_;
    std::vector<std::unique_ptr<Slot>> slots_;
    std::vector<Slot *> round_slots_;  // the slots of the decode running now (read by abort_cb)
    // A round's scratch, kept to allocate nothing per step.
    std::vector<Slot *> round_prompting_, round_generating_;
    std::vector<int> sample_rows_;
    TargetDistribution target_p_;   // sample_by_rejection's p
    std::vector<double> residual_;  // and its residual
    std::vector<float> q_dense_;    // and the q row it reads, spread over the vocabulary
    std::vector<std::pair<llama_seq_id, int32_t>> round_segments_;  // the verify's (sequence, rows)
    DecodePadding padding_;  // the verify's padding rows
    // Verify batches are padded to one pass (padding.hpp): pads_shared_decodes, and a head, if
    // any, that reads only the rows it is given.
    bool pads_verify_ = false;
    int32_t round_padding_rows_ = 0;  // this round's
    std::vector<int32_t> logprob_order_;  // top_logprobs' sort scratch
    std::atomic<int32_t> n_running_{0};
    std::atomic<int32_t> joining_{0};  // callers in begin() waiting for the lock a round holds
    std::atomic<int32_t> last_slot_{0};
    uint64_t begin_count_ = 0;
    PromptCache saved_;

    // One draft length per round for every slot on "auto": the costs it weighs are the
    // round's (all running slots'), and it outlives calls: what it learns persists.
    DraftController controller_;
    std::vector<Slot::Call::Observation> round_observations_;  // this round's completed ones (run_round)
    // A round's cost is its period, from its start to the next round's: the callers' work between rounds
    // (their tokens, the lock, the interpreter) is paid once per round (140-240 us, 2-3% of a round on two
    // Zen 5 cores). The controller gets a round's cost when the next one starts; a call that
    // begins in between, or a prompt chunk in the round, makes it no sample.
    struct RoundCost {
        int32_t drafted = 0, streams = 0, threads = 0;
        int64_t head_us = 0, compute_us = 0;
        bool resumed = false;
        int64_t started_us = 0;
    };
    std::optional<RoundCost> pending_cost_;
    int64_t round_started_us_ = 0;
    bool round_prompted_ = false;  // the round also processed a prompt chunk (no cost sample)
    void give_round_cost(int64_t next_round_us);  // the pending round's period (< 0: none, not a sample)
    // Compute threads of each generation round, fewer when the machine is busy (thread_controller.hpp).
    ThreadController threads_{1};
    int32_t threads_set_ = 0, threads_batch_set_ = 0;  // what the contexts are set to (0: their defaults)
    // This round tries a thread count once (the thread controller's probe): its time is no
    // steady cost sample for the draft length's controller, which keeps costs per thread count.
    bool round_is_thread_probe_ = false;
    int32_t round_threads_ = 0;  // compute threads of the round running now
    void use_threads(int32_t n, int32_t n_batch);

    AtomicCounters total_;
};

}  // namespace mtp
