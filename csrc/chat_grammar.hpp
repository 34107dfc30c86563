#pragma once

// Narrowing of the chat layer's tool-call grammars (common/chat.h) to what its own parser
// reads back as the call the tools describe: where a format's grammar leaves a part of the
// call free (a recipient, a content type, attributes, any key or value, repetitions), every
// string it admits still parses, but a model can write in that part without end. The
// narrowed grammar admits a subset of the chat layer's (so every string it admits is one the
// chat layer's parser reads), built from the tools' schemas; parsing stays the chat layer's.

#include <string>
#include <vector>

#include "chat.h"

namespace mtp {

struct GrammarContext {
    const std::vector<common_chat_tool> & tools;  // the tools the grammar was built for
    bool parallel_tool_calls = false;
    bool lazy = false;  // the grammar applies from a trigger on (the trigger's text is not narrowed)
};

// The grammar narrowed for each format it knows (GLM-4.6/4.7, Spark2.5 and Laguna's call end,
// Mistral's call ids, gpt-oss, muse-glimmer, Kimi-K2, Kimi-K3, LFM2, Gemma-4, MiniCPM5 and the
// tagged-argument formats with the same shapes); a grammar of another shape is returned as it is.
std::string narrow_tool_grammar(const std::string & grammar, const GrammarContext & ctx);

// Bounds and checks a JSON schema passes before json_schema_to_grammar reads it (`what` names it
// in the ToolSchemaError): at most kSchemaEnumValues enum values in all, every `pattern` one the
// grammar expresses (anchored, no back-reference or lookaround), no min above its max, no $ref
// cycle. parse_json_schema also bounds the text's nesting (kJsonDepth) before parsing it.
inline constexpr size_t kSchemaEnumValues = 1000;
void check_json_schema(const common_json & schema, const std::string & what);
common_json parse_json_schema(const std::string & text, const std::string & what);

}  // namespace mtp
