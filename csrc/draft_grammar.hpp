// A copy of a call's grammar that follows one draft (grammar-aware drafting): which tokens
// it allows next, and which text it forces after them. The call's own sampler is never
// touched; the target still samples every token under the real grammar, so a draft chosen
// here only changes what is proposed, never what is committed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common.h"
#include "llama.h"
#include "sampling.h"

namespace mtp {

// Characters of forced text looked at per draft (more than the longest draft takes).
constexpr size_t kMaxForcedBytes = 128;

// Tokens for text a grammar forces, as the target writes them. llama.cpp's tokenizer gives
// the shortest tokenization, but a model often spells the same text otherwise (SmolLM2 writes
// compact JSON's `":"` as `":` `"`, having learnt JSON with spaces; under a schema it may write
// a key `em` `ployed` in one answer and whole in the next), and each such forced draft is
// rejected. So the session remembers what the target wrote inside forced text: after a given
// token, the tokens it wrote there, latest first; and, whatever came before, the punctuation
// tokens it wrote instead of a forced draft. Forced text is drafted with the latest remembered
// token that spells it at each point (after the same token, else the longest remembered
// punctuation), and with the tokenizer's own tokens elsewhere. Kept per session: the habits are
// the model's, and calls repeat them.
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
    const std::string & piece(llama_token id);
    // The remembered token that spells `text` at `pos` after `prev`, or -1.
    llama_token remembered(llama_token prev, const std::string & text, size_t pos);
    // `instead`: the target wrote `id` where a different forced draft stood.
    void remember(llama_token prev, llama_token id, bool instead);

    const llama_vocab * vocab_;
    std::unordered_map<llama_token, std::vector<llama_token>> after_;  // prev -> what the target wrote next, latest first
    std::vector<llama_token> punctuation_;  // punctuation the target wrote instead of a forced draft, latest first
    std::unordered_map<llama_token, std::string> pieces_;  // text of the tokens met (at most the vocabulary)
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
