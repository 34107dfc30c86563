// A copy of a call's grammar that follows one draft (grammar-aware drafting): which tokens
// it allows next, and which text it forces after them. The call's own sampler is never
// touched; the target still samples every token under the real grammar, so a draft chosen
// here only changes what is proposed, never what is committed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common.h"
#include "llama.h"
#include "sampling.h"

namespace mtp {

// Characters of forced text looked at per draft (more than the longest draft takes).
constexpr size_t kMaxForcedBytes = 128;

// Tokens for text a grammar forces, as the target writes it. llama.cpp's tokenizer gives
// the shortest tokenization, but a model often spells the same text otherwise (SmolLM2
// writes compact JSON's `":"` as `":` `"`, having learnt JSON with spaces), and each such
// forced draft is rejected. Where the target took a shorter token than a forced draft, that
// token is split the target's way from then on; where it took the whole token a split had
// cut, it stays whole after the same preceding token. Kept per session: the habits are the
// model's, and calls repeat them.
class ForcedTokenizer {
public:
    explicit ForcedTokenizer(const llama_vocab * vocab) : vocab_(vocab) {}
    // Appends the tokens of `text`, which follows token `prev`, at most `max_tokens`;
    // returns how many.
    size_t tokenize(const std::string & text, llama_token prev, size_t max_tokens, std::vector<llama_token> & out);
    // The target verified `drafted` (after `prev`; the forced ones last, `n_forced` of them)
    // and wrote `ids` (its accepted drafts and one token of its own).
    void learn(llama_token prev, const std::vector<llama_token> & drafted, size_t n_forced,
               const std::vector<llama_token> & ids);

private:
    static uint64_t pair(llama_token prev, llama_token id) { return ((uint64_t) (uint32_t) prev << 32) | (uint32_t) id; }
    void expand(llama_token id, int depth, std::vector<llama_token> & out, llama_token & prev) const;

    const llama_vocab * vocab_;
    std::unordered_map<llama_token, std::vector<llama_token>> splits_;  // token -> the target's spelling
    std::unordered_set<uint64_t> whole_;  // (preceding token, token) the target writes whole
    llama_tokens tokens_;  // kept: nothing is allocated per step once grown
};

class DraftGrammar {
public:
    // Copies the grammar of `sampler` in its current state, for a draft that follows token
    // `prev`. False (and empty) when no grammar applies now: none, or a lazy one inside a
    // reasoning section.
    bool reset(common_sampler * sampler, ForcedTokenizer * tokenizer, llama_token prev);
    void clear() { grammar_.reset(); }
    explicit operator bool() const { return grammar_ != nullptr; }

    bool allows(llama_token id);
    // The highest-scoring token the grammar allows among `logits` (the argmax when it is
    // allowed), or -1 when none of the best kCandidates is (the draft stops there); a head
    // scoring at most kFullCheck tokens has all of them checked.
    llama_token best_allowed(const float * logits, int32_t n_vocab);
    // Moves the grammar past `id` (an allowed token that is not end-of-generation).
    void accept(llama_token id);
    // The tokens of the text the grammar forces next (see ForcedTokenizer), at most
    // `max_tokens`, appended to `out`; returns how many.
    size_t append_forced(size_t max_tokens, std::vector<llama_token> & out);

    static constexpr int32_t kCandidates = 16;
    static constexpr int32_t kFullCheck = 1024;

private:
    struct Free {
        void operator()(llama_sampler * s) const { llama_sampler_free(s); }
    };
    std::unique_ptr<llama_sampler, Free> grammar_;
    ForcedTokenizer * tokenizer_ = nullptr;
    llama_token prev_ = -1;
    std::vector<llama_token_data> top_;  // kept: nothing is allocated per step once grown
};

}  // namespace mtp
