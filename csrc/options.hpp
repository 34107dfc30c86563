// Session and generation options as the engine takes them, with their checks.
// Field names equal those of mtp_llm.options (SessionOptions, GenerationOptions),
// which fill these structs by name; an unset std::optional is Python's None.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "llama.h"
#include "sampling.h"

namespace mtp {

// A draft length: a fixed number of tokens (0 = plain decoding) or "auto".
using DraftLength = std::variant<int32_t, std::string>;

struct ContextOptions {
    DraftLength n_draft = std::string("auto");
    int32_t n_draft_max = 4;                 // bound of "auto"
    float p_min = 0.0f;                      // stop drafting below this draft confidence (llama.cpp's p_min)
    int32_t n_ctx = 2048;
    int32_t n_batch = 512;
    std::optional<int32_t> n_threads;        // unset = hardware concurrency
    std::optional<int32_t> n_threads_batch;  // unset = n_threads
    bool adaptive_threads = true;            // fewer threads while the machine is busy (thread_controller.hpp)
    std::optional<bool> flash_attn;          // unset = auto (off on CPU-only builds)
    std::optional<std::string> type_k;       // ggml type name ("f16", "q8_0", ...); unset = f16
    std::optional<std::string> type_v;
    bool offload_kqv = true;
    std::string rollback = "auto";           // hybrid targets: "auto" (= "rs"), "rs", "checkpoint"
    bool fuse_catch_up = true;               // MtpDrafter where it applies, else common_speculative
    bool grammar_drafts = true;              // with the fused driver: text a grammar forces is drafted as is
    bool cache_prompt = true;                // reuse the prompt prefix already in the contexts
    double cache_size_mb = 256.0;            // saved states of other conversations (0 = keep only the current one)
    int32_t n_parallel = 1;                  // generations at once, one sequence each; n_ctx is shared among them
};

// Values of ContextOptions::rollback (mtp_llm.options reads them as _core.ROLLBACK_MODES).
inline constexpr std::array<const char *, 3> kRollbackModes = {"auto", "rs", "checkpoint"};

constexpr int32_t kMinSlotContext = 256;  // llama.cpp sizes each sequence's cache in steps of 256 cells
constexpr int32_t kMaxParallel = 256;     // llama.cpp's LLAMA_MAX_SEQ

// The chat layer's tool-call grammar (chat.hpp): which text starts a lazy
// grammar, the special tokens its output is written with, and the generation
// prompt the template already wrote (fed to the grammar and reasoning tracker first).
struct ChatGrammar {
    bool lazy = false;
    std::vector<std::string> trigger_words;
    std::vector<std::string> trigger_patterns;
    std::vector<std::string> preserved_tokens;
    std::string generation_prompt;
    std::string thinking_start;             // with thinking_end: no tool call starts inside reasoning
    std::vector<std::string> thinking_end;
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
    std::optional<std::string> grammar;  // GBNF
    std::optional<ChatGrammar> chat;     // set when `grammar` comes from the chat layer
    int32_t reasoning_budget = -1;       // tokens of reasoning (chat tags): -1 = unlimited, 0 = none
};

struct GenerateOptions {
    int32_t max_tokens = 256;
    std::optional<DraftLength> n_draft;  // unset = the session's; 0 = plain decoding; "auto"
    std::optional<bool> cache_prompt;    // unset = the session's
    std::optional<double> timeout;   // seconds; unset = none
    std::vector<std::string> stop;
    SamplingOptions sampling;
    bool logprobs = false;         // each token's log-probability under the target
    int32_t top_logprobs = 0;      // and the k most likely tokens' (implies logprobs)
    std::optional<float> draft_temp;  // the head's sampling temperature; unset = the call's; 0 = its argmax
};

constexpr int32_t kMaxTopLogprobs = 20;

// The longest draft a session with `o` may propose (what its contexts are sized for).
int32_t longest_draft(const ContextOptions & o);
bool is_auto(const DraftLength & n);

// Throw Error(InvalidOption) naming the bad value and how to fix it.
void validate(const ContextOptions & o, int32_t max_draft);
void validate(const GenerateOptions & g, int32_t session_longest_draft);

// ggml type of a cache type name; -1 when unset.
int32_t cache_type(const std::optional<std::string> & name, const char * option);
// "auto" is llama.cpp's choice except on CPU-only builds (see options.cpp).
llama_flash_attn_type resolve_flash_attn(const ContextOptions & o);
// `vocab` tokenizes a chat grammar's preserved tokens and reasoning tags.
common_params_sampling to_common_params(const SamplingOptions & s, const llama_vocab * vocab = nullptr);
// llama.cpp context parameters for `o` (sizes, threads, attention, caches); the
// caller adds what is its own (abort callback, recurrent-state snapshots).
llama_context_params to_context_params(const ContextOptions & o);

// GBNF grammar that accepts exactly the JSON documents matching a JSON schema.
std::string json_schema_grammar(const std::string & schema_json);

}  // namespace mtp
