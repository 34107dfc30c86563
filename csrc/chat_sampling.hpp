// A chat turn's sampler set-up, as llama-server does it: the chat layer's grammar triggers
// and preserved tokens, and the reasoning section (llama.cpp's reasoning-budget sampler,
// and the grammar edits that keep reasoning where the budget can see it).
#pragma once

#include <string>

#include "options.hpp"
#include "sampling.h"

namespace mtp {

// The reasoning start tag in a whole-answer grammar's root rule as its own tokens (the
// budget sampler recognises the tag by them), where the generation prompt has not opened it.
std::string reasoning_tag_in_its_tokens(const std::string & grammar, const ChatGrammar & chat,
                                        const llama_vocab * vocab);
// The optional reasoning section of a whole-answer grammar's root rule left out, where the
// generation prompt has not opened it (reasoning_budget 0, or a forced call with thinking off).
std::string without_reasoning(const std::string & grammar, const ChatGrammar & chat);
// Triggers, preserved tokens and the reasoning budget (`budget` tokens; -1 = unlimited) of
// `chat` into `sp`.
void apply_chat_grammar(const ChatGrammar & chat, int32_t budget, const llama_vocab * vocab, common_params_sampling & sp);

}  // namespace mtp
