// mtp_llm engine: llama.cpp MTP speculative decoding in plain C++.
//
// Ownership: every llama.cpp handle lives in a unique_ptr member; member order
// is teardown order (reverse), so the speculative state and the MTP context,
// which point at the target context, go first. Nothing here touches Python.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "llama-cpp.h"
#include "sampling.h"
#include "speculative.h"
#include "common.h"
#include "errors.hpp"
#include "gguf_checks.hpp"

namespace mtp {


// Last llama.cpp log lines, attached to error messages.
std::string recent_log();
void set_log_echo(bool echo);

struct ModelOptions {
    bool load_mtp = true;
    int32_t n_gpu_layers = 0;
    bool use_mmap = true;
    bool use_mlock = false;
};


// Opens a GGUF's header (metadata only) and checks it; throws Error(ModelLoad).
GgufInfo inspect_gguf(const std::string & path);

// GBNF grammar that accepts exactly the JSON documents matching a JSON schema.
std::string json_schema_grammar(const std::string & schema_json);

class Model {
public:
    Model(const std::string & path, const ModelOptions & opts);

    llama_model * get() const { return model_.get(); }
    const llama_vocab * vocab() const { return llama_model_get_vocab(model_.get()); }
    const std::string & path() const { return path_; }
    const ModelOptions & options() const { return opts_; }
    const GgufInfo & info() const { return info_; }

    std::string architecture() const { return info_.architecture; }
    std::string description() const;
    int32_t n_vocab() const;
    int32_t n_embd() const;
    int32_t n_ctx_train() const;
    int32_t n_layer() const;
    int32_t n_mtp_heads() const;
    uint64_t n_params() const;
    uint64_t size_bytes() const;
    std::string chat_template() const;      // "" when the GGUF has none
    bool is_mtp_sidecar() const { return info_.n_nextn > 0 && !info_.has_trunk; }
    bool has_mtp_head() const { return info_.n_nextn > 0 && info_.has_mtp_tensors; }
    bool has_mtp_graph() const { return architecture_has_mtp_graph(info_.architecture); }

    int32_t token_bos() const;
    int32_t token_eos() const;
    bool is_eog(int32_t token) const;

    std::vector<int32_t> tokenize(const std::string & text, bool add_special, bool parse_special) const;
    std::string detokenize(const std::vector<int32_t> & tokens, bool render_special) const;
    std::string token_piece(int32_t token, bool render_special) const;
    void check_tokens(const std::vector<int32_t> & tokens) const;

    // Mean-pooled, L2-normalised hidden states of each text (for retrieval).
    std::vector<std::vector<float>> embed(const std::vector<std::string> & texts, int32_t n_threads) const;

    // Chat messages as (role, content); template "" uses the GGUF's own.
    std::string apply_chat_template(const std::vector<std::pair<std::string, std::string>> & messages,
                                    bool add_generation_prompt, const std::string & chat_template) const;

private:
    std::string path_;
    ModelOptions opts_;
    GgufInfo info_;
    llama_model_ptr model_;
};

// Every-position outputs of the target and of the MTP head on one token
// sequence, for checking an exported model against its reference implementation.
struct ForwardResult {
    int32_t n_tokens = 0, n_vocab = 0, n_embd = 0;
    std::vector<float> trunk_logits;  // [n_tokens, n_vocab]
    std::vector<float> trunk_hidden;  // [n_tokens, n_embd], the post-norm state the head consumes
    std::vector<float> head_logits;   // [n_tokens, n_vocab]: row i predicts token i+2 from (h_{i-1}, token i)
    std::vector<float> head_hidden;   // [n_tokens, n_embd]
};

// `head` is the model holding the MTP head (the target itself, or a sidecar).
ForwardResult forward_with_head(const Model & target, const Model & head, const std::vector<int32_t> & tokens,
                                int32_t n_threads);

struct ContextOptions {
    int32_t n_draft = 3;
    int32_t n_ctx = 2048;
    int32_t n_batch = 512;
    int32_t n_threads = 0;       // 0 = hardware concurrency
    int32_t n_threads_batch = 0; // 0 = n_threads
    int32_t flash_attn = -1;     // -1 auto (off on CPU-only builds), 0 off, 1 on
    int32_t type_k = -1;         // ggml_type, -1 = f16 default
    int32_t type_v = -1;
    bool offload_kqv = true;
    bool use_rs_rollback = true; // hybrid targets: recurrent-state rollback instead of checkpoints
};

struct SamplingOptions {
    float temp = 0.8f;
    int32_t top_k = 40;
    float top_p = 0.95f;
    float min_p = 0.05f;
    uint32_t seed = LLAMA_DEFAULT_SEED;
    float repeat_penalty = 1.0f;
    float frequency_penalty = 0.0f;
    float presence_penalty = 0.0f;
    int32_t penalty_last_n = 64;
    std::string grammar;
};

struct GenerateOptions {
    int32_t max_tokens = 256;
    int32_t n_draft = -1;               // -1 = the session's n_draft; 0 = plain decoding
    double timeout_s = 0.0;             // 0 = none
    std::vector<std::string> stop;
    SamplingOptions sampling;
};

constexpr int kMaxDraftPositions = 16;

// Raw counters; derived rates are computed from these by the caller.
struct Counters {
    uint64_t iters = 0;             // target verify passes (including replays)
    uint64_t replays = 0;           // passes that re-verified tokens after a checkpoint restore
    uint64_t drafts_generated = 0;  // draft tokens proposed (replays excluded)
    uint64_t drafts_accepted = 0;   // draft tokens accepted (replays excluded)
    uint64_t tokens_emitted = 0;    // tokens committed to the output
    uint64_t prompt_tokens = 0;
    uint64_t generations = 0;
    uint64_t t_draft_us = 0, t_verify_us = 0, t_sample_us = 0, t_ckpt_us = 0, t_total_us = 0;
    uint64_t t_prompt_us = 0;
    uint64_t t_first_token_us = 0;  // of the latest generation (prompt start -> first token)
    std::array<uint64_t, kMaxDraftPositions> drafted_at{};   // proposals at draft position i
    std::array<uint64_t, kMaxDraftPositions> accepted_at{};  // acceptances at draft position i
    int32_t n_draft = 0;
};

// The same counters as atomics: written by the decoding thread, readable
// from any thread while a generation runs.
class AtomicCounters {
public:
    void add(const Counters & d);
    void set_first_token(uint64_t us) { t_first_token_us_.store(us, std::memory_order_relaxed); }
    Counters snapshot(int32_t n_draft) const;
    void reset();

private:
    std::atomic<uint64_t> iters_{0}, replays_{0}, drafts_generated_{0}, drafts_accepted_{0},
        tokens_emitted_{0}, prompt_tokens_{0}, generations_{0}, t_draft_us_{0}, t_verify_us_{0},
        t_sample_us_{0}, t_ckpt_us_{0}, t_total_us_{0}, t_prompt_us_{0}, t_first_token_us_{0};
    std::array<std::atomic<uint64_t>, kMaxDraftPositions> drafted_at_{}, accepted_at_{};
};

struct TokenOut {
    int32_t id;
    std::string text;  // valid UTF-8; "" while bytes are held back
};

struct StepResult {
    std::vector<TokenOut> tokens;
    bool finished = false;
    std::string finish_reason;  // "eog", "length", "stop"
};

// Turns token pieces into valid UTF-8 text, holding back split characters and
// any tail that could begin a stop string.
class TextAssembler {
public:
    void reset(std::vector<std::string> stop);
    // Returns the text that is safe to emit after appending `piece`; sets
    // `stopped` when a stop string completed (the stop string is dropped).
    std::string push(const std::string & piece, bool & stopped);
    std::string flush();  // end of generation: the rest, invalid bytes replaced

private:
    std::vector<std::string> stop_;
    std::string pending_;
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
    Counters call_stats() const { return call_.snapshot(active_n_draft_); }
    void reset_stats() { total_.reset(); }
    void print_stats() const;

    const ContextOptions & options() const { return opts_; }
    int32_t n_ctx() const;
    std::string rollback_mode() const;  // "none", "partial", "rs", "checkpoint"
    std::string flash_attn() const;     // "on", "off", or "auto" (llama.cpp decides per device)
    const std::shared_ptr<Model> & target() const { return target_; }

private:
    static bool abort_cb(void * data);
    bool drafting() const { return spec_ && active_n_draft_ > 0; }
    void check_deadline();
    void decode_or_throw(llama_context * ctx, common_batch & batch, const char * what);
    void process_prompt_chunk();
    void speculative_iteration(StepResult & out);
    void commit_tokens(const std::vector<llama_token> & ids, StepResult & out);
    void finish(StepResult & out, const std::string & reason);

    std::shared_ptr<Model> target_;
    std::shared_ptr<Model> draft_model_;
    ContextOptions opts_;
    llama_flash_attn_type flash_attn_type_ = LLAMA_FLASH_ATTN_TYPE_AUTO;

    // Declaration order = reverse teardown order.
    llama_context_ptr ctx_tgt_;
    llama_context_ptr ctx_dft_;
    common_speculative_ptr spec_;
    common_batch batch_;  // target prompt/verify batch, reused: no allocation per step
    common_batch accepted_batch_;  // the verify batch's accepted prefix, for the MTP head's catch-up
    common_params_speculative spec_params_;
    common_context_seq_rm_type seq_rm_tgt_ = COMMON_CONTEXT_SEQ_RM_TYPE_PART;
    common_context_seq_rm_type seq_rm_dft_ = COMMON_CONTEXT_SEQ_RM_TYPE_PART;

    // Current generation.
    std::atomic<bool> active_{false};
    std::atomic<bool> cancel_requested_{false};
    std::atomic<int64_t> deadline_us_{0};
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
    int32_t active_n_draft_ = 0;
    bool prompt_phase_ = false;
    bool finished_ = false;
    int64_t t_begin_us_ = 0;
    bool first_token_seen_ = false;
    TextAssembler text_;

    AtomicCounters total_;
    AtomicCounters call_;
};

}  // namespace mtp
