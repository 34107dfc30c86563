// Chat through llama.cpp's chat layer (common/chat.h), as llama-server --jinja
// uses it: a model's own template renders messages and tools, and returns the
// prompt, the tool-call grammar with its lazy triggers, and the parser that
// splits the output into content, reasoning and tool calls.
//
// Every llama.cpp exception is caught here and rethrown as an Error naming the
// template or tool, so bad input never reaches Python as an abort.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "chat.h"
#include "model.hpp"

namespace mtp {

// Bounds on what a model file, a user or a model's output hands llama.cpp's chat layer, whose
// Jinja engine and JSON readers recurse without one (docs/reliability.md lists them).
inline constexpr size_t kTemplateBytes = 1u << 20;  // a chat template's text
inline constexpr int kTemplateNesting = 200;        // open blocks + brackets + chained operators
inline constexpr int kJsonDepth = 128;              // messages, arguments, tools, schemas, output

// A template's text within the bounds and parsed by llama.cpp's Jinja parser, else a
// ChatTemplateError naming the bound or the parser's reason and how to pass another template.
void check_chat_template(const std::string & text, const std::string & label);

// The deepest nesting of [ and { in `text`: outside JSON strings, or (`strings` false) anywhere.
int json_depth(const std::string & text, bool strings = true);

// One rendering request. Messages and tools are OpenAI chat-completions JSON.
struct ChatRequest {
    std::string messages_json = "[]";
    std::string tools_json;            // "" or "[]" = no tools
    std::string tool_choice = "auto";  // "auto", "required", "none", or a tool's name
    bool parallel_tool_calls = false;
    bool enable_thinking = true;
    bool extract_reasoning = true;     // split reasoning from content (else it stays in the content)
    bool add_generation_prompt = true;
    std::string reasoning_effort;      // "" = the template's default; else passed to it (llama-server's field)
};

// What the chat layer returns for a request: the prompt and how to generate and parse the answer.
struct ChatPrompt {
    std::string prompt;
    std::string format;                      // the chat layer's format name ("peg-native", ...)
    std::string grammar;                     // GBNF; "" = unconstrained
    bool grammar_lazy = false;               // the grammar applies from the first trigger on
    std::vector<std::string> trigger_words;
    std::vector<std::string> trigger_patterns;
    std::vector<std::string> preserved_tokens;  // special tokens the parser reads: emitted as text
    std::vector<std::string> additional_stops;
    std::string generation_prompt;           // what the template put after the last turn (e.g. "<think>\n")
    bool supports_thinking = false;
    std::string thinking_start;
    std::vector<std::string> thinking_end;
    std::string parser;                      // serialized PEG parser
    bool extract_reasoning = true;
};

// One parsed assistant turn.
struct ChatToolCall {
    std::string name;
    std::string arguments;  // JSON text (possibly incomplete while streaming)
    std::string id;         // "" unless the format carries ids
};

struct ChatMessage {
    std::string content;
    std::string reasoning_content;
    std::vector<ChatToolCall> tool_calls;
};

// A model's chat templates (the GGUF's, or an override), parsed once.
class ChatTemplates {
public:
    ChatTemplates(std::shared_ptr<Model> model, const std::string & override_template);

    ChatPrompt apply(const ChatRequest & request) const;
    // jinja capability flags (supports_tools, supports_tool_calls, ...).
    std::vector<std::pair<std::string, bool>> caps() const;
    std::string source() const;
    const std::string & label() const { return label_; }  // names the template in errors

private:
    common_chat_params render(const ChatRequest & request, const std::vector<common_chat_tool> & tools,
                              common_chat_tool_choice choice) const;
    bool parses_reasoning(const ChatRequest & request, const ChatPrompt & prompt) const;

    std::shared_ptr<Model> model_;
    std::string label_;
    common_chat_templates_ptr tmpls_;
};

// Parses model output for one ChatPrompt (full output, or a prefix while streaming).
class ChatParser {
public:
    explicit ChatParser(const ChatPrompt & prompt);
    ChatMessage parse(const std::string & text, bool partial) const;

private:
    common_chat_parser_params params_;
};

}  // namespace mtp
