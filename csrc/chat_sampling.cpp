#include "chat_sampling.hpp"

#include <algorithm>
#include <cctype>
#include <climits>
#include <regex>

#include "gbnf.hpp"
#include "json-schema-to-grammar.h"
#include "runtime.hpp"
#include "text.hpp"

namespace mtp {

namespace {

bool ends_with(const llama_tokens & tokens, size_t end, const llama_tokens & tag) {
    return !tag.empty() && tag.size() <= end && std::equal(tag.begin(), tag.end(), tokens.begin() + (end - tag.size()));
}

// The tokens of the generation prompt inside a reasoning block: from its last start tag to
// the end tag that closes it, or to the prompt's end ("<think>\n", or "<think>\n\n</think>"
// when thinking is off). llama.cpp's budget sampler is fed the generation prompt as
// sampling.cpp tokenizes it and counts these, but they are the template's, not the model's
// (they are added to the budget, so a block the model opens again later gets them too).
int32_t prefilled_reasoning(const common_params_sampling & sp, const llama_vocab * vocab) {
    llama_tokens tokens;
    const std::string & prompt = sp.generation_prompt;
    for (llama_token t : common_tokenize(vocab, prompt, false, true)) {
        const std::string piece = common_token_to_piece(vocab, t, true);
        if (tokens.empty() && !piece.empty() && std::isspace((unsigned char) piece[0]) && !prompt.empty() &&
            !std::isspace((unsigned char) prompt[0])) {
            continue;  // as sampling.cpp skips a space some tokenizers put before the first special token
        }
        tokens.push_back(t);
    }
    size_t opened = 0;
    for (size_t i = tokens.size(); i > 0 && opened == 0; --i) {
        if (ends_with(tokens, i, sp.reasoning_budget_start)) opened = i;
    }
    if (opened == 0) return 0;
    size_t i = opened;
    while (i < tokens.size()) {
        ++i;
        if (std::any_of(sp.reasoning_budget_end.begin(), sp.reasoning_budget_end.end(),
                        [&](const llama_tokens & tag) { return ends_with(tokens, i, tag); })) {
            break;
        }
    }
    return (int32_t) (i - opened);
}

}  // namespace

// The reasoning start tag the model writes (where the generation prompt has not opened the
// section) is, in the root rule of a grammar that constrains the whole answer, the tag's own
// tokens: llama.cpp's budget sampler recognises the tag by its tokens, and a model that spelled
// it in others (the grammar's literal takes any) would reason past the budget unseen. In a
// real model the tag is one special token, which is what it writes.
std::string reasoning_tag_in_its_tokens(const std::string & grammar, const ChatGrammar & chat,
                                        const llama_vocab * vocab) {
    if (chat.lazy || chat.thinking_start.empty() || !vocab ||
        chat.generation_prompt.find(chat.thinking_start) != std::string::npos) {
        return grammar;
    }
    std::string tokens;
    for (llama_token t : common_tokenize(vocab, chat.thinking_start, false, true)) {
        tokens += (tokens.empty() ? "(<[" : " <[") + std::to_string(t) + "]>";
    }
    if (tokens.empty()) {
        return grammar;
    }
    tokens += ")";
    const std::string tag = gbnf_format_literal(chat.thinking_start);
    return edit_root_rule(grammar, [&](std::string root) {
        for (size_t at = root.find(tag); at != std::string::npos; at = root.find(tag, at + tokens.size())) {
            root.replace(at, tag.size(), tokens);
        }
        return root;
    });
}

// As llama-server sets up a chat request's sampler (tools/server/server-schema.cpp).
void apply_chat_grammar(const ChatGrammar & chat, int32_t budget, const llama_vocab * vocab, common_params_sampling & sp) {
    sp.grammar_lazy = chat.lazy && !sp.grammar.empty();
    for (const auto & word : chat.trigger_words) {
        sp.grammar_triggers.push_back({COMMON_GRAMMAR_TRIGGER_TYPE_WORD, word});
    }
    for (const auto & pattern : chat.trigger_patterns) {
        sp.grammar_triggers.push_back({COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN, pattern});
    }
    for (const auto & text : chat.preserved_tokens) {
        const auto ids = common_tokenize(vocab, text, false, true);
        if (ids.size() == 1) {
            sp.preserved_tokens.insert(ids[0]);
        }
    }
    sp.generation_prompt = chat.generation_prompt;
    // llama.cpp's reasoning-budget sampler watches the format's reasoning tags: it keeps
    // a lazy grammar from triggering inside reasoning, and with a budget it forces the
    // (first) end tag once the model has written `budget` tokens of reasoning (llama-server's
    // --reasoning-budget). What the generation prompt already put inside the block is
    // added to the sampler's count: the budget is the model's own tokens.
    if ((sp.grammar_lazy || budget >= 0) && !chat.thinking_start.empty() && !chat.thinking_end.empty()) {
        sp.reasoning_budget_start = common_tokenize(vocab, chat.thinking_start, false, true);
        for (const auto & tag : chat.thinking_end) {
            if (!tag.empty()) {
                sp.reasoning_budget_end.push_back(common_tokenize(vocab, tag, false, true));
            }
        }
        if (budget >= 0 && !sp.reasoning_budget_end.empty()) {
            const int32_t prefilled = prefilled_reasoning(sp, vocab);
            sp.reasoning_budget_tokens = budget > INT32_MAX - prefilled ? INT32_MAX : budget + prefilled;
            sp.reasoning_budget_forced = sp.reasoning_budget_end.front();
        }
    }
}

// reasoning_budget 0 (or thinking off) under a grammar that constrains the whole answer (a forced
// call): the optional reasoning section of the chat layer's root rule (`("<think>" until-N "</think>")?`),
// where the generation prompt has not opened it, is left out, so no reasoning can be written
// in any spelling of the tags (the budget sampler only sees the tags' own tokens).
std::string without_reasoning(const std::string & grammar, const ChatGrammar & chat) {
    if (chat.thinking_start.empty() || chat.generation_prompt.find(chat.thinking_start) != std::string::npos) {
        return grammar;
    }
    const std::regex section(R"re( \()re" + regex_escape(gbnf_format_literal(chat.thinking_start)) +
                             R"re(\??(?:[^()\n]|\([^()\n]*\))*\buntil-\d+(?:[^()\n]|\([^()\n]*\))*\)\?)re");
    return edit_root_rule(grammar, [&](const std::string & root) { return std::regex_replace(root, section, ""); });
}

}  // namespace mtp
