#include "chat.hpp"

#include <algorithm>
#include <regex>

#include "chat_grammar.hpp"
#include "chat_sampling.hpp"
#include "gbnf.hpp"
#include "errors.hpp"
#include "options.hpp"
#include "json-schema-to-grammar.h"
#include "jinja/lexer.h"
#include "jinja/limits.h"
#include "jinja/parser.h"
#include "runtime.hpp"

namespace mtp {

namespace {

// An exception's message on one line, cut to a readable length.
std::string one_line(const std::string & s) {
    std::string line = s;
    std::replace(line.begin(), line.end(), '\n', ' ');
    return line.size() > 400 ? line.substr(0, 400) + "..." : line;
}

const char * const kOtherTemplate = "pass another template as chat_template='...'";

// How deep llama.cpp's Jinja parser and evaluator recurse on a template: its open blocks (an if
// one more for each elif) plus, in the tag read, each open bracket and the operators chained in
// it since its last comma or colon (a left-deep expression). Stops counting past `limit`.
int template_nesting(const std::vector<jinja::token> & tokens, int limit) {
    using jinja::token;
    std::vector<int> blocks;  // each open block's weight
    std::vector<int> frames;  // operators chained in each open bracket of the tag
    int depth = 0, deepest = 0, in_tag = 0;
    for (size_t i = 0; i < tokens.size() && deepest <= limit; ++i) {
        const token & t = tokens[i];
        switch (t.t) {
            case token::open_statement: {
                frames.assign(1, 0);
                in_tag = 1;
                const std::string name = i + 1 < tokens.size() && tokens[i + 1].t == token::identifier ? tokens[i + 1].value : "";
                if (name == "if" || name == "for" || name == "macro" || name == "call" || name == "filter" ||
                    name == "generation" || name == "set") {
                    bool block = true;  // {% set x %}...{% endset %}; not {% set x = ... %}
                    for (size_t j = i + 1; name == "set" && j < tokens.size() && tokens[j].t != token::close_statement; ++j) {
                        block = block && tokens[j].t != token::equals;
                    }
                    if (block) {
                        blocks.push_back(1);
                        depth += 1;
                    }
                } else if (name == "elif" && !blocks.empty()) {
                    ++blocks.back();
                    ++depth;
                } else if (name.rfind("end", 0) == 0 && !blocks.empty()) {
                    depth -= blocks.back();
                    blocks.pop_back();
                }
                break;
            }
            case token::open_expression: frames.assign(1, 0); in_tag = 1; break;
            case token::close_statement:
            case token::close_expression: frames.clear(); in_tag = 0; break;
            case token::open_paren:
            case token::open_square_bracket:
            case token::open_curly_bracket: frames.push_back(0); ++in_tag; break;
            case token::close_paren:
            case token::close_square_bracket:
            case token::close_curly_bracket:
                if (frames.size() > 1) {
                    in_tag -= 1 + frames.back();
                    frames.pop_back();
                }
                break;
            case token::comma:
            case token::colon:
                if (!frames.empty()) {
                    in_tag -= frames.back();
                    frames.back() = 0;
                }
                break;
            case token::identifier:
                if (t.value != "and" && t.value != "or" && t.value != "not" && t.value != "in" && t.value != "is" &&
                    t.value != "if" && t.value != "else") {
                    break;
                }
                [[fallthrough]];
            case token::additive_binary_operator:
            case token::multiplicative_binary_operator:
            case token::comparison_binary_operator:
            case token::unary_operator:
            case token::pipe:
            case token::dot:
            case token::call_operator:
                if (!frames.empty()) {
                    ++frames.back();
                    ++in_tag;
                }
                break;
            default: break;
        }
        deepest = std::max(deepest, depth + in_tag);
    }
    return deepest;
}

common_json parse_json(const std::string & text, const char * what) {
    if (const int depth = json_depth(text); depth > kJsonDepth) {
        fail(ErrorKind::InvalidOption, std::string(what) + " nest " + std::to_string(depth) + " deep, over the limit of " +
                                           std::to_string(kJsonDepth));
    }
    try {
        return common_json::parse(text);
    } catch (const std::exception & e) {
        fail(ErrorKind::InvalidOption, std::string(what) + " is not valid JSON: " + e.what());
    }
}

// Each tool's parameters must convert to a grammar: checked one by one, so the
// error names the tool (the chat layer converts them all at once).
std::vector<common_chat_tool> parse_tools(const std::string & tools_json) {
    if (tools_json.empty()) {
        return {};
    }
    if (const int depth = json_depth(tools_json); depth > kJsonDepth) {
        fail(ErrorKind::ToolSchema, "the tools nest " + std::to_string(depth) + " deep, over the limit of " +
                                        std::to_string(kJsonDepth));
    }
    const common_json tools = parse_json(tools_json, "tools");
    std::vector<common_chat_tool> out;
    try {
        out = common_chat_tools_parse_oaicompat(tools);
    } catch (const std::exception & e) {
        fail(ErrorKind::InvalidOption, one_line(e.what()));
    }
    for (const auto & tool : out) {
        if (tool.name.empty()) {
            fail(ErrorKind::ToolSchema, "a tool has an empty name");
        }
        try {
            const common_json params = common_json::parse(tool.parameters.empty() ? "{}" : tool.parameters);
            check_json_schema(params, "tool '" + tool.name + "': its parameters schema");
            json_schema_to_grammar(common_chat_tool_parameters(common_json{{"parameters", params}}));
        } catch (const Error &) {
            throw;
        } catch (const std::exception & e) {
            fail(ErrorKind::ToolSchema, "tool '" + tool.name + "': its parameters schema cannot be turned into a "
                                        "grammar: " + one_line(e.what()));
        }
    }
    return out;
}

// A forced call (tool_choice "required" or a tool's name) is the answer: the chat
// layer's grammar lets free text precede the call (the root's `until-N` rule right
// before the tool-call rule, with the optional tags of a content section around it,
// as Kimi-K3's "<|open|>response<|sep|>"), which is dropped here. Reasoning, where
// the format has it, still comes first, unless thinking is off: then the messages a
// multi-message format (gpt-oss, muse-glimmer: `(start analysis)* start tool-call`)
// writes before the call's (reasoning, preambles) are dropped too. Roots of another
// shape are left as they are.
std::string force_call(const std::string & grammar, bool thinking) {
    static const std::regex messages_before_call(R"(^root ::= \(start [\w-]+\)\* (start [\w-]*tool-call)$)");
    static const std::regex content_before_call(R"(\buntil-\d+\??(\s+(?:space\s+)?[\w-]*tool-call))");
    static const std::regex section_before_call(
        R"re((\s)"[^"\\]*"\?\s+until-\d+\??\s+"[^"\\]*"\?(\s+(?:space\s+)?[\w-]*tool-call))re");
    return edit_root_rule(grammar, [&](const std::string & line) {
        std::string root = std::regex_replace(line, content_before_call, "$1");
        if (!thinking) {
            root = std::regex_replace(root, messages_before_call, "root ::= $1");
        }
        return std::regex_replace(root, section_before_call, "$1$2");
    });
}

// The first render limit hit in this thread's scope (patch 0024), as a ChatTemplateError.
void check_render_limits(const std::string & label) {
    if (!jinja::limits().exceeded.empty()) {
        fail(ErrorKind::ChatTemplate, label + " exceeds a render limit: " + jinja::limits().exceeded + "; " + kOtherTemplate);
    }
}

}  // namespace

int json_depth(const std::string & text, bool strings) {
    int depth = 0, deepest = 0;
    bool in_string = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\') {
                ++i;
            } else if (c == '"') {
                in_string = false;
            }
        } else if (c == '"') {
            in_string = strings;
        } else if (c == '[' || c == '{') {
            deepest = std::max(deepest, ++depth);
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
    return deepest;
}

void check_chat_template(const std::string & text, const std::string & label) {
    if (text.size() > kTemplateBytes) {
        fail(ErrorKind::ChatTemplate, label + " is " + std::to_string(text.size()) + " bytes, over the limit of " +
                                          std::to_string(kTemplateBytes) + "; " + kOtherTemplate);
    }
    jinja::lexer_result lexed;
    try {
        lexed = jinja::lexer().tokenize(text);
    } catch (const std::exception & e) {
        fail(ErrorKind::ChatTemplate, label + " does not parse: " + one_line(e.what()) + "; " + kOtherTemplate);
    }
    if (const int nesting = template_nesting(lexed.tokens, kTemplateNesting); nesting > kTemplateNesting) {
        fail(ErrorKind::ChatTemplate, label + " nests over " + std::to_string(kTemplateNesting) + " deep (blocks, "
                                      "brackets and chained operators counted together); " + kOtherTemplate);
    }
    try {
        jinja::parse_from_tokens(lexed);
    } catch (const std::exception & e) {
        fail(ErrorKind::ChatTemplate, label + " does not parse: " + one_line(e.what()) + "; " + kOtherTemplate);
    }
}

ChatTemplates::ChatTemplates(std::shared_ptr<Model> model, const std::string & override_template)
    : model_(std::move(model)) {
    label_ = override_template.empty() ? "the chat template of '" + model_->path() + "'"
                                       : "the chat_template given for '" + model_->path() + "'";
    if (override_template.empty() && model_->chat_template().empty()) {
        fail(ErrorKind::ChatTemplate, "'" + model_->path() + "' has no chat template: pass chat_template='...' "
                                      "(a Jinja template)");
    }
    check_chat_template(override_template.empty() ? model_->chat_template() : override_template, label_);
    if (override_template.empty()) {
        if (const char * tool_use = llama_model_chat_template(model_->get(), "tool_use")) {
            check_chat_template(tool_use, "the tool_use chat template of '" + model_->path() + "'");
        }
    }
    clear_log();
    const jinja::limit_scope scope;  // the capability probes share one render budget
    try {
        tmpls_ = common_chat_templates_init(model_->get(), override_template);
    } catch (const std::exception & e) {
        check_render_limits(label_);
        fail(ErrorKind::ChatTemplate, with_log(label_ + " does not parse: " + one_line(e.what())));
    }
    check_render_limits(label_);
    if (!tmpls_) {
        fail(ErrorKind::ChatTemplate, with_log(label_ + " could not be loaded"));
    }
}

std::string ChatTemplates::source() const {
    return common_chat_templates_source(tmpls_.get());
}

std::vector<std::pair<std::string, bool>> ChatTemplates::caps() const {
    const auto m = common_chat_templates_get_caps(tmpls_.get());
    return {m.begin(), m.end()};
}

common_chat_params ChatTemplates::render(const ChatRequest & request, const std::vector<common_chat_tool> & tools,
                                         common_chat_tool_choice choice) const {
    common_chat_templates_inputs inputs;
    const common_json messages = parse_json(request.messages_json, "messages");
    try {
        inputs.messages = common_chat_msgs_parse_oaicompat(messages);
    } catch (const std::exception & e) {
        fail(ErrorKind::InvalidPrompt, one_line(e.what()));
    }
    inputs.tools = tools;
    inputs.tool_choice = choice;
    inputs.parallel_tool_calls = request.parallel_tool_calls;
    inputs.enable_thinking = request.enable_thinking;
    inputs.reasoning_format = request.extract_reasoning ? COMMON_REASONING_FORMAT_AUTO : COMMON_REASONING_FORMAT_NONE;
    inputs.add_generation_prompt = request.add_generation_prompt;
    inputs.use_jinja = true;
    if (!request.reasoning_effort.empty()) {
        inputs.chat_template_kwargs["reasoning_effort"] = common_json(request.reasoning_effort).dump();
    }
    clear_log();
    for (const auto & msg : inputs.messages) {
        for (const auto & call : msg.tool_calls) {
            if (const int depth = json_depth(call.arguments); depth > kJsonDepth) {
                fail(ErrorKind::InvalidPrompt, "the arguments of the tool call '" + call.name + "' in the messages nest " +
                                                   std::to_string(depth) + " deep, over the limit of " +
                                                   std::to_string(kJsonDepth));
            }
        }
    }
    try {
        common_chat_params params = common_chat_templates_apply(tmpls_.get(), inputs);
        check_render_limits(label_);
        return params;
    } catch (const Error &) {
        throw;
    } catch (const std::exception & e) {
        check_render_limits(label_);
        fail(ErrorKind::ChatTemplate, label_ + " failed to render " + (tools.empty() ? "the messages" : "the messages "
                                      "and tools") + ": " + one_line(e.what()));
    }
}

ChatPrompt ChatTemplates::apply(const ChatRequest & request) const {
    const jinja::limit_scope scope;  // every render of the request shares one budget
    std::vector<common_chat_tool> tools = parse_tools(request.tools_json);
    common_chat_tool_choice choice = COMMON_CHAT_TOOL_CHOICE_AUTO;
    std::vector<common_chat_tool> forced;  // a named tool_choice: the grammar allows that tool only
    if (request.tool_choice == "required") {
        choice = COMMON_CHAT_TOOL_CHOICE_REQUIRED;
    } else if (request.tool_choice == "none") {
        choice = COMMON_CHAT_TOOL_CHOICE_NONE;
    } else if (request.tool_choice != "auto") {
        auto it = std::find_if(tools.begin(), tools.end(), [&](const auto & t) { return t.name == request.tool_choice; });
        if (it == tools.end()) {
            std::string names;
            for (const auto & t : tools) names += (names.empty() ? "'" : ", '") + t.name + "'";
            fail(ErrorKind::InvalidOption, "tool_choice names the tool '" + request.tool_choice +
                                               "', which is not among the tools given (" +
                                               (names.empty() ? std::string("none") : names) + ")");
        }
        forced = {*it};
        choice = COMMON_CHAT_TOOL_CHOICE_REQUIRED;
    }
    if (choice == COMMON_CHAT_TOOL_CHOICE_REQUIRED && tools.empty()) {
        fail(ErrorKind::InvalidOption, "tool_choice '" + request.tool_choice + "' needs at least one tool");
    }

    common_chat_params params = render(request, tools, choice);
    if (!forced.empty()) {
        // The prompt lists every tool; generation and parsing allow the named one only.
        common_chat_params narrowed = render(request, forced, choice);
        narrowed.prompt = std::move(params.prompt);
        params = std::move(narrowed);
    }

    ChatPrompt out;
    out.prompt = std::move(params.prompt);
    out.format = common_chat_format_name(params.format);
    const GrammarContext narrowing{forced.empty() ? tools : forced, request.parallel_tool_calls, params.grammar_lazy};
    out.grammar = params.grammar;
    if (std::string narrowed = narrow_tool_grammar(out.grammar, narrowing); narrowed != out.grammar) {
        // A safety net: a narrowed grammar that llama.cpp does not read leaves the chat layer's.
        clear_log();
        if (llama_sampler * check = llama_sampler_init_grammar(model_->vocab(), narrowed.c_str(), "root")) {
            llama_sampler_free(check);
            out.grammar = std::move(narrowed);
        }
        clear_log();
    }
    if (choice == COMMON_CHAT_TOOL_CHOICE_REQUIRED) {
        out.grammar = force_call(out.grammar, request.enable_thinking);
        if (!request.enable_thinking) {  // thinking off: no reasoning section before the call either
            ChatGrammar tags;
            tags.thinking_start = params.thinking_start_tag;
            tags.generation_prompt = params.generation_prompt;
            out.grammar = without_reasoning(out.grammar, tags);
        }
    }
    out.grammar_lazy = params.grammar_lazy;
    for (const auto & t : params.grammar_triggers) {
        if (t.type == COMMON_GRAMMAR_TRIGGER_TYPE_WORD) {
            out.trigger_words.push_back(t.value);
        } else if (t.type == COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN) {
            out.trigger_patterns.push_back(t.value);
        } else if (t.type == COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN_FULL) {
            const std::string & p = t.value;
            out.trigger_patterns.push_back((p.empty() || p.front() != '^' ? "^" : "") + p +
                                           (p.empty() || p.back() != '$' ? "$" : ""));
        } else {
            out.trigger_words.push_back(t.value);  // a token trigger: its text
        }
    }
    out.preserved_tokens = std::move(params.preserved_tokens);
    out.additional_stops = std::move(params.additional_stops);
    out.generation_prompt = std::move(params.generation_prompt);
    out.supports_thinking = params.supports_thinking;
    out.thinking_start = std::move(params.thinking_start_tag);
    out.thinking_end = std::move(params.thinking_end_tags);
    out.parser = std::move(params.parser);
    out.extract_reasoning = request.extract_reasoning;
    out.supports_thinking = out.supports_thinking && parses_reasoning(request, out);
    check_render_limits(label_);
    return out;
}

// The chat layer names reasoning tags for some formats whose parser does not read a reasoning
// section for every template (LFM2's, for templates that never think): such a turn has no
// reasoning (what the model writes between the tags is content) and says so. Checked on the
// same messages without tools: a reasoning section and an answer, parsed.
bool ChatTemplates::parses_reasoning(const ChatRequest & request, const ChatPrompt & prompt) const {
    if (!request.extract_reasoning || prompt.thinking_end.empty() || prompt.thinking_end.front().empty()) {
        return true;
    }
    ChatRequest plain = request;
    plain.tools_json.clear();
    plain.tool_choice = "auto";
    try {
        const common_chat_params params = render(plain, {}, COMMON_CHAT_TOOL_CHOICE_AUTO);
        ChatPrompt probe;
        probe.format = common_chat_format_name(params.format);
        probe.generation_prompt = params.generation_prompt;
        probe.parser = params.parser;
        probe.extract_reasoning = true;
        const bool opened = !prompt.thinking_start.empty() &&
                            params.generation_prompt.find(prompt.thinking_start) != std::string::npos;
        const std::string text = (opened ? "" : prompt.thinking_start) + "plan" + prompt.thinking_end.front() + "answer";
        return ChatParser(probe).parse(text, false).reasoning_content.find("plan") != std::string::npos;
    } catch (const std::exception &) {
        return true;  // the probe does not say (the messages need the tools, ...)
    }
}

ChatParser::ChatParser(const ChatPrompt & prompt) {
    common_chat_params cp;
    cp.generation_prompt = prompt.generation_prompt;
    params_ = common_chat_parser_params(cp);
    for (int f = 0; f < COMMON_CHAT_FORMAT_COUNT; ++f) {
        if (prompt.format == common_chat_format_name((common_chat_format) f)) {
            params_.format = (common_chat_format) f;
        }
    }
    params_.reasoning_format = prompt.extract_reasoning ? COMMON_REASONING_FORMAT_AUTO : COMMON_REASONING_FORMAT_NONE;
    params_.parse_tool_calls = true;
    if (!prompt.parser.empty()) {
        try {
            params_.parser.load(prompt.parser);
        } catch (const std::exception & e) {
            fail(ErrorKind::ChatTemplate, std::string("the chat layer's output parser does not load: ") + e.what());
        }
    }
}

ChatMessage ChatParser::parse(const std::string & text, bool partial) const {
    if (const int depth = json_depth(text, false); depth > kJsonDepth) {
        fail(ErrorKind::ChatParse, "the output nests brackets " + std::to_string(depth) + " deep, over the limit of " +
                                       std::to_string(kJsonDepth) + " the chat parser reads");
    }
    common_chat_msg msg;
    try {
        msg = common_chat_parse(text, partial, params_);
    } catch (const std::exception & e) {
        fail(ErrorKind::ChatParse, std::string("the output does not parse in the template's format (") +
                                       common_chat_format_name(params_.format) + "): " + one_line(e.what()));
    }
    ChatMessage out;
    out.content = std::move(msg.content);
    out.reasoning_content = std::move(msg.reasoning_content);
    for (auto & tc : msg.tool_calls) {
        out.tool_calls.push_back({std::move(tc.name), std::move(tc.arguments), std::move(tc.id)});
    }
    return out;
}

}  // namespace mtp
