#include "chat_grammar.hpp"

#include <algorithm>
#include <cctype>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <string_view>

#include "chat.hpp"
#include "errors.hpp"
#include "gbnf.hpp"
#include "json-schema-to-grammar.h"

namespace mtp {

namespace {

using namespace gbnf;

// ------------------------------------------------------------------ schemas --

struct Argument {
    std::string name;
    common_json schema;
    bool required = false;
};

struct Tool {
    std::string name;
    common_json parameters;
    std::vector<Argument> arguments;  // in the schema's order
};

// An object schema's properties, in its order, and which are required.
std::vector<Argument> properties_of(const common_json & schema) {
    std::vector<Argument> out;
    if (!schema.is_object() || !schema.contains("properties") || !schema.at("properties").is_object()) {
        return out;
    }
    std::vector<std::string> required;
    if (schema.contains("required") && schema.at("required").is_array()) {
        for (const auto & r : schema.at("required")) {
            if (r.is_string()) required.push_back(r.get<std::string>());
        }
    }
    for (const auto & prop : schema.at("properties").items()) {
        const bool req = std::find(required.begin(), required.end(), prop.key()) != required.end();
        out.push_back({prop.key(), prop.value(), req});
    }
    return out;
}

std::vector<Tool> read_tools(const std::vector<common_chat_tool> & tools) {
    std::vector<Tool> out;
    for (const auto & t : tools) {
        Tool tool{t.name, {}, {}};
        try {
            const common_json params = common_json::parse(t.parameters.empty() ? "{}" : t.parameters);
            tool.parameters = common_chat_tool_parameters(common_json{{"parameters", params}});
        } catch (const std::exception &) {
            continue;  // checked before (parse_tools); nothing to narrow
        }
        tool.arguments = properties_of(tool.parameters);
        out.push_back(std::move(tool));
    }
    return out;
}

std::string schema_type(const common_json & schema) {
    return schema.is_object() && schema.contains("type") && schema.at("type").is_string()
               ? schema.at("type").get<std::string>()
               : "";
}

// Rules added to a grammar, named apart from its own.
class Additions {
public:
    explicit Additions(Rules & rules) : rules_(rules) {}

    // A JSON value of `schema` (its $defs taken from `root`), as json_schema_to_grammar
    // writes it; "" where the schema does not convert.
    std::string json_value(const common_json & schema, const common_json & root) {
        common_json s = schema;
        for (const char * defs : {"$defs", "definitions"}) {
            if (s.is_object() && root.is_object() && root.contains(defs) && !s.contains(defs)) {
                s[defs] = root.at(defs);
            }
        }
        std::string grammar;
        try {
            grammar = json_schema_to_grammar(s, /* force_gbnf= */ true);
        } catch (const std::exception &) {
            return "";
        }
        const Rules converted(grammar);
        const std::string prefix = next_prefix();
        std::map<std::string, std::string> names;
        for (const auto & [name, body] : converted.list()) {
            if (!name.empty()) names[name] = prefix + name;
        }
        if (!names.count("root")) return "";
        for (const auto & [name, body] : converted.list()) {
            if (!name.empty()) rules_.add(prefix + name, rename(body, names));
        }
        return prefix + "root";
    }

    std::string rule(const std::string & body) {
        const std::string name = next_prefix() + "rule";
        rules_.add(name, body);
        return name;
    }

private:
    std::string next_prefix() { return "mtp-" + std::to_string(count_++) + "-"; }

    Rules & rules_;
    int count_ = 0;
};

// `items` in the schema's order, each at most once, each required one present, separated
// by `sep` ("" = none): the required ones first, as json_schema_to_grammar orders a JSON
// object's keys. `at_least_one`: where the format needs one (LFM2's argument list).
std::string ordered(const std::vector<std::pair<std::string, bool>> & items, const std::string & sep,
                    bool at_least_one) {
    std::vector<std::string> required, optional;
    for (const auto & [item, req] : items) (req ? required : optional).push_back(item);
    const std::string join = sep.empty() ? " " : " " + sep + " ";
    std::string out;
    for (const auto & r : required) out += (out.empty() ? "" : join) + "(" + r + ")";
    if (!required.empty() || sep.empty()) {
        for (const auto & o : optional) {
            out += (out.empty() ? "" : " ") + std::string("(") + (required.empty() ? "" : sep + " ") + o + ")?";
        }
        return "(" + out + ")";
    }
    // No required item, with separators: the first one present, then the later ones.
    std::string alts;
    for (size_t i = 0; i < optional.size(); ++i) {
        std::string tail = "(" + optional[i] + ")";
        for (size_t j = i + 1; j < optional.size(); ++j) tail += " (" + sep + " " + optional[j] + ")?";
        alts += (alts.empty() ? "" : " | ") + tail;
    }
    return "(" + alts + ")" + (at_least_one ? "" : "?");
}

// ------------------------------------------------------------------ formats --

// A tool's arguments, `(A | B | ...)` repeated at will (tagged formats: MiniCPM5,
// muse-glimmer, Kimi-K3; the optional ones after the required ones in the chat layer's
// generic tagged formats, Qwen3-Coder's and the like; LFM2's `A ("," space A)*`), become the
// arguments in the schema's order, each at most once and the required ones present. `narrow`
// may narrow an argument's text. Returns whether the expression changed.
bool order_arguments(std::string & expr, const Tool & tool, Rules & rules,
                     const std::function<std::string(const std::string &, const Argument &)> & narrow) {
    if (tool.arguments.empty()) return false;
    // The argument an alternative writes: the one whose name it has as a literal (directly,
    // or else in a rule it names).
    auto argument_in = [&](const std::vector<std::string> & lits) -> const Argument * {
        const Argument * found = nullptr;
        for (const auto & a : tool.arguments) {
            if (std::find(lits.begin(), lits.end(), literal(a.name)) != lits.end()) {
                if (found) return nullptr;
                found = &a;
            }
        }
        return found;
    };
    auto argument_of = [&](const std::string & alt) -> const Argument * {
        if (const Argument * a = argument_in(literals(alt))) return a;
        std::vector<std::string> lits;
        for (const auto & ref : rule_refs(alt)) {
            if (const std::string * body = rules.find(ref)) {
                const auto more = literals(*body);
                lits.insert(lits.end(), more.begin(), more.end());
            }
        }
        return argument_in(lits);
    };
    auto rebuild = [&](const std::vector<std::string> & alts, const std::string & trail, const std::string & sep,
                       bool at_least_one) -> std::optional<std::string> {
        std::vector<std::optional<std::pair<std::string, bool>>> by_argument(tool.arguments.size());
        for (const auto & alt : alts) {
            const Argument * a = alt.empty() ? nullptr : argument_of(alt);
            if (!a || by_argument[a - tool.arguments.data()]) return std::nullopt;
            by_argument[a - tool.arguments.data()] = {{narrow(alt, *a) + trail, a->required}};
        }
        std::vector<std::pair<std::string, bool>> seq;
        for (const auto & entry : by_argument) {
            if (entry) seq.push_back(*entry);
        }
        return ordered(seq, sep, at_least_one);
    };
    bool changed = false;
    const auto spans = item_spans(expr);
    for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        std::string item = expr.substr(it->first, it->second - it->first);
        std::optional<std::string> rebuilt;
        if (item.size() > 3 && item.back() == '*' && is_group(item.substr(0, item.size() - 1))) {
            // (A | B)*, ((A | B) space)*, (space (A | B))*
            const std::string inner = group_inner(item.substr(0, item.size() - 1));
            std::vector<std::string> alts = alternatives(inner);
            std::string lead, trail;
            std::vector<std::string> parts = items(inner);
            if (alts.size() == 1 && parts.size() >= 2) {
                if (parts.back() == "space") {
                    trail = " space";
                    parts.pop_back();
                }
                if (parts.size() >= 2 && parts.front() == "space") {
                    lead = "space ";
                    parts.erase(parts.begin());
                }
                std::string body;
                for (const auto & p : parts) body += (body.empty() ? "" : " ") + p;
                alts = alternatives(is_group(body) ? group_inner(body) : body);
            }
            for (auto & alt : alts) alt = lead.empty() ? alt : lead + alt;
            rebuilt = rebuild(alts, trail, "", false);
        } else if (is_group(item)) {
            // ((A | B) ("," space (A | B))*)
            const std::vector<std::string> parts = items(group_inner(item));
            if (parts.size() == 2 && parts[1].size() > 3 && parts[1].back() == '*' &&
                parts[1].rfind("(\",\" space ", 0) == 0) {
                const std::string & first = parts[0];
                rebuilt = rebuild(alternatives(is_group(first) ? group_inner(first) : first), "", "\",\" space", true);
            } else if (alternatives(group_inner(item)).size() == 1) {
                std::string inner = group_inner(item);  // (A B (C | D)*): the arguments inside
                if (order_arguments(inner, tool, rules, narrow)) rebuilt = "(" + inner + ")";
            }
        }
        if (rebuilt) {
            expr.replace(it->first, it->second - it->first, *rebuilt);
            changed = true;
        }
    }
    return changed;
}

std::string keep(const std::string & alt, const Argument &) { return alt; }

// gpt-oss: the content type after the channel ("<|constrain|>json", "json" in the template)
// is any name in the chat layer's grammar.
void gpt_oss(std::string & grammar) {
    static const std::string free_type = "\"<|constrain|>\"? [A-Za-z0-9_-]+";
    for (size_t at = grammar.find(free_type); at != std::string::npos; at = grammar.find(free_type, at)) {
        grammar.replace(at, free_type.size(), "\"<|constrain|>\"? \"json\"");
    }
}

// muse-glimmer: a call's recipient (" to=" + the tool's name, as the template writes it) is any
// text; with a lazy grammar it is what the trigger matched, and stays so.
void muse_glimmer_recipient(std::string & grammar) {
    static const std::regex recipient(
        R"re(" to=" until-\d+ ("<\|message\|><atem:function_calls>" space "<atem:invoke name=\\"" ("(?:[^"\\]|\\.)*")))re");
    grammar = std::regex_replace(grammar, recipient, "\" to=\" $2 $1");
}

// Kimi-K2: the call index after "functions.NAME:" is any number of digits.
void kimi_k2_index(std::string & grammar) {
    static const std::regex index(R"re(("functions\." "(?:[^"\\]|\\.)*" ":") \[0-9\]\+)re");
    grammar = std::regex_replace(grammar, index, "$1 [0-9]{1,4}");
}

// Kimi-K3: a call's attributes after its tool name, an argument's after its key, and its value
// are free text. The template writes ` index="N"` and ` type="T"` (the value's JSON type), and
// a value as JSON unless the schema's type is "string" (which the parser reads as raw text).
void kimi_k3(Rules & rules, const std::vector<Tool> & tools, bool parallel, Additions & add) {
    static const std::regex call_attrs(R"re(^(\("<\|open\|>call tool=\\"" "(?:[^"\\]|\\.)*" "\\"") until-\d+ )re");
    static const std::regex arg(
        R"re(^("<\|open\|>argument key=\\"" "(?:[^"\\]|\\.)*" "\\"") until-\d+ ("<\|sep\|>") (until-\d+) ("<\|close\|>argument<\|sep\|>")$)re");
    for (const auto & tool : tools) {
        std::string * call = rules.find(rule_name("kimi-k3-tool-" + tool.name));
        if (!call) continue;
        *call = std::regex_replace(*call, call_attrs, "$1 (\" index=\\\"\" [0-9]{1,4} \"\\\"\")? ",
                                   std::regex_constants::format_first_only);
        for (const auto & a : tool.arguments) {
            std::string * body = rules.find(rule_name("kimi-k3-arg-" + tool.name + "-" + a.name));
            std::smatch m;
            if (!body || !std::regex_match(*body, m, arg)) continue;
            const std::string type = schema_type(a.schema);
            static const std::map<std::string, std::string> xtml = {
                {"string", "string"}, {"integer", "number"}, {"number", "number"}, {"boolean", "boolean"},
                {"null", "null"},     {"object", "object"},  {"array", "array"},
            };
            const auto t = xtml.find(type);
            const std::string attr =
                t != xtml.end() ? literal(" type=\"" + t->second + "\"")
                                : "\" type=\\\"\" (\"string\" | \"number\" | \"boolean\" | \"null\" | \"object\" | "
                                  "\"array\") \"\\\"\"";
            std::string value = m[3];
            if (!type.empty() && type != "string") {
                const std::string json = add.json_value(a.schema, tool.parameters);
                if (!json.empty()) value = json;
            }
            *body = m[1].str() + " " + attr + " " + m[2].str() + " " + value + " " + m[4].str();
        }
        order_arguments(*call, tool, rules, keep);
    }
    if (!parallel) {
        if (std::string * section = rules.find("kimi-k3-tool-call")) {
            static const std::string many = ")+ \"<|close|>tools<|sep|>\"";
            const size_t at = section->find(many);
            if (at != std::string::npos) section->replace(at, many.size(), ") \"<|close|>tools<|sep|>\"");
        }
    }
}

// LFM2: an argument's value is any Python or JSON value; one of the schema's type is JSON
// (the parser reads JSON literals), strings keep their quoted text.
void lfm2(Rules & rules, const std::vector<Tool> & tools, Additions & add) {
    for (const auto & tool : tools) {
        std::string * body = rules.find(rule_name("tool-" + tool.name));
        if (!body || body->find("python-or-json-value") == std::string::npos) continue;
        order_arguments(*body, tool, rules, [&](const std::string & alt, const Argument & a) {
            static const std::string free_value = "python-or-json-value";
            const size_t at = alt.find(free_value);
            if (at == std::string::npos) return alt;
            const std::string json = add.json_value(a.schema, tool.parameters);
            return json.empty() ? alt : alt.substr(0, at) + json + alt.substr(at + free_value.size());
        });
    }
}

// Gemma-4's values: strings between <|"|>, keys bare, numbers, booleans and null as in JSON.
std::string gemma4_value(const common_json & s, const common_json & root, Additions & add, int depth);

std::string gemma4_literal(const common_json & v) {
    if (v.is_string()) return literal("<|\"|>" + v.get<std::string>() + "<|\"|>");
    if (v.is_number() || v.is_boolean() || v.is_null()) return literal(v.dump());
    return "";
}

std::string gemma4_object(const common_json & s, const common_json & root, Additions & add, int depth) {
    const std::vector<Argument> properties = properties_of(s);
    if (properties.empty()) return "gemma4-dict";
    std::vector<std::pair<std::string, bool>> kvs;
    for (const auto & p : properties) {
        if (p.name.empty() || p.name.find_first_of(":}") != std::string::npos) return "gemma4-dict";
        kvs.emplace_back(literal(p.name + ":") + " " + gemma4_value(p.schema, root, add, depth + 1), p.required);
    }
    const bool any_required = std::any_of(kvs.begin(), kvs.end(), [](const auto & kv) { return kv.second; });
    const std::string members = ordered(kvs, "\",\" space", true);
    return add.rule(any_required ? "\"{\" space " + members + " space \"}\""
                                 : "\"{\" space (\"}\" | " + members + " space \"}\")");
}

std::string gemma4_value(const common_json & s, const common_json & root, Additions & add, int depth) {
    if (depth > 16 || !s.is_object()) return "gemma4-value";
    auto choice = [&](const std::vector<std::string> & alts) {
        std::string out;
        for (const auto & a : alts) {
            if (a.empty()) return std::string("gemma4-value");
            out += (out.empty() ? "(" : " | ") + a;
        }
        return out.empty() ? std::string("gemma4-value") : out + ")";
    };
    if (s.contains("const")) return choice({gemma4_literal(s.at("const"))});
    if (s.contains("enum") && s.at("enum").is_array()) {
        std::vector<std::string> alts;
        for (const auto & v : s.at("enum")) alts.push_back(gemma4_literal(v));
        return choice(alts);
    }
    for (const char * key : {"anyOf", "oneOf"}) {
        if (s.contains(key) && s.at(key).is_array()) {
            std::vector<std::string> alts;
            for (const auto & sub : s.at(key)) alts.push_back(gemma4_value(sub, root, add, depth + 1));
            return choice(alts);
        }
    }
    if (s.contains("type") && s.at("type").is_array()) {
        std::vector<std::string> alts;
        for (const auto & t : s.at("type")) {
            common_json one = s;
            one["type"] = t;
            alts.push_back(gemma4_value(one, root, add, depth + 1));
        }
        return choice(alts);
    }
    const std::string type = schema_type(s);
    if (type == "string") return "gemma4-string";
    if (type == "integer" || type == "number" || type == "boolean" || type == "null") {
        const std::string json = add.json_value(s, root);
        return json.empty() ? "gemma4-value" : json;
    }
    if (type == "object") return gemma4_object(s, root, add, depth);
    if (type == "array" && s.contains("items") && s.at("items").is_object()) {
        const std::string item = gemma4_value(s.at("items"), root, add, depth + 1);
        return add.rule("\"[\" space (\"]\" | " + item + " (\",\" space " + item + ")* space \"]\")");
    }
    return "gemma4-value";
}

// Gemma-4: a call's arguments are any dictionary; they are the tool's schema, in Gemma's syntax.
void gemma4(Rules & rules, const std::vector<Tool> & tools, Additions & add) {
    if (!rules.find("gemma4-dict")) return;
    for (const auto & tool : tools) {
        std::string * body = rules.find(rule_name("tool-" + tool.name));
        const std::string free_args = " gemma4-dict";
        if (!body || body->size() < free_args.size() ||
            body->compare(body->size() - free_args.size(), free_args.size(), free_args) != 0) {
            continue;
        }
        const std::string args = gemma4_object(tool.parameters, tool.parameters, add, 0);
        body->replace(body->size() - free_args.size(), free_args.size(), " " + args);
    }
}

// The tagged-argument formats whose calls end with the call's end tag right after the last
// argument (GLM-4.6, GLM-4.7, Spark2.5, Laguna: "...</arg_value></tool_call>"): the chat
// layer's parser requires the end tag there (a lookahead, which the grammar cannot say;
// Laguna's tolerates whitespace), its grammar lets whitespace in, and an output with it does
// not parse. The grammar is narrowed to what the templates render and every such parser
// reads: no whitespace between a call's last argument and its end tag (a tool without
// arguments keeps the space after its name).
std::string close_calls_tightly(const std::string & grammar) {
    static const std::regex call_end(R"re(\(((?:tool-[\w-]+)(?: \| tool-[\w-]+)*)\) space ("))re");
    std::vector<std::string> after_arguments;  // tools whose rule ends with an argument's rule
    const Rules rules(grammar);
    for (const auto & [name, rule] : rules.list()) {
        if (name.rfind("tool-", 0) != 0) {
            continue;
        }
        std::string_view body = rule;
        while (!body.empty() && (body.back() == ')' || body.back() == '*' || body.back() == '?')) {
            body.remove_suffix(1);
        }
        const size_t last = body.find_last_of(" (");
        const std::string_view tail = last == std::string_view::npos ? body : body.substr(last + 1);
        if (tail.rfind("tool-", 0) == 0 && tail.find("-arg-") != std::string_view::npos) {
            after_arguments.push_back(name);
        }
    }
    if (after_arguments.empty()) {
        return grammar;
    }
    std::string out;
    auto from = grammar.cbegin();
    for (std::sregex_iterator it(grammar.begin(), grammar.end(), call_end), last; it != last; ++it) {
        const std::string alternatives = (*it)[1];
        bool tight = false;
        for (size_t at = 0; at <= alternatives.size() && !tight;) {
            const size_t bar = std::min(alternatives.find(" | ", at), alternatives.size());
            const std::string name = alternatives.substr(at, bar - at);
            tight = std::find(after_arguments.begin(), after_arguments.end(), name) != after_arguments.end();
            at = bar + 3;
        }
        out.append(from, (*it)[0].first);
        out += tight ? "(" + alternatives + ") \"" : std::string((*it)[0]);
        from = (*it)[0].second;
    }
    out.append(from, grammar.cend());
    return out;
}

// Mistral's call ids ("[CALL_ID]" + id, before "[ARGS]") are nine letters and digits: its
// templates reject any other id when the conversation is rendered back. The chat layer's
// grammar lets the id be any text; it is narrowed to the shape the template takes back.
std::string mistral_call_ids(const std::string & grammar) {
    static const std::regex free_id(R"re("\[CALL_ID\]" until-\d+)re");
    return std::regex_replace(grammar, free_id, R"re("[CALL_ID]" [a-zA-Z0-9]{9})re");
}

// The one character of a GBNF class "[c]" (escapes unread), or none.
std::optional<std::string> single_char_class(const std::string & item) {
    if (item.size() == 3 && item.front() == '[' && item.back() == ']' && item[1] != '^' && item[1] != '\\') {
        return std::string(1, item[1]);
    }
    if (item.size() == 4 && item.front() == '[' && item.back() == ']' && item[1] == '\\') {
        switch (item[2]) {
            case 'n': return std::string("\n");
            case 't': return std::string("\t");
            case 'r': return std::string("\r");
            default: return std::string(1, item[2]);
        }
    }
    return std::nullopt;
}

// The text an "accept until" automaton of the chat layer ends with: `rule` reads any text up
// to and including it (ac-N ::= [c0] ac-N-01 | [^c0] ac-N; ... ac-N-k ::= ... | [ck] | [^ck] ac-N).
std::optional<std::string> closing_of(Rules & rules, const std::string & rule) {
    std::string closing;
    std::string current = rule;
    for (size_t step = 1; step < 256; ++step) {
        const std::string * body = rules.find(current);
        if (!body) return std::nullopt;
        char name[16];
        std::snprintf(name, sizeof name, "-%02zu", step);
        const std::string next = rule + name;
        bool advanced = false, ended = false;
        for (const auto & alt : alternatives(*body)) {
            const std::vector<std::string> parts = items(alt);
            if (parts.size() == 2 && parts[1] == next) {
                if (auto c = single_char_class(parts[0])) {
                    closing += *c;
                    advanced = true;
                }
            } else if (parts.size() == 1) {
                if (auto c = single_char_class(parts[0])) {
                    closing += *c;
                    ended = true;
                }
            }
        }
        if (ended && !advanced) return closing;
        if (!advanced) return std::nullopt;
        current = next;
    }
    return std::nullopt;
}

// A string argument's allowed values when its schema lists them (enum of strings, or const).
std::vector<std::string> string_choices(const common_json & schema) {
    std::vector<std::string> out;
    if (!schema.is_object()) return out;
    if (schema.contains("const") && schema.at("const").is_string()) {
        return {schema.at("const").get<std::string>()};
    }
    if (schema.contains("enum") && schema.at("enum").is_array()) {
        for (const auto & v : schema.at("enum")) {
            if (!v.is_string()) return {};
            out.push_back(v.get<std::string>());
        }
    }
    return out;
}

// The free value of an argument rule's expression replaced by `choice`: an until-N before the
// closing literal, an accept-until automaton (the closing read back from it), or a rule that is
// one of those; a trailing group is looked into. False where none is found.
bool narrow_string_value(std::string & expr, const std::string & choice, Rules & rules) {
    std::vector<std::string> parts = items(expr);
    bool changed = false;
    for (size_t i = 0; i < parts.size() && !changed; ++i) {
        const bool last = i + 1 == parts.size();
        const bool literal_follows = !last && !parts[i + 1].empty() && parts[i + 1].front() == '"';
        if (last && is_group(parts[i]) && alternatives(group_inner(parts[i])).size() == 1) {
            std::string inner = group_inner(parts[i]);
            if (narrow_string_value(inner, choice, rules)) {
                parts[i] = "(" + inner + ")";
                changed = true;
            }
            continue;
        }
        std::string value = parts[i];
        std::string closing;  // a literal that ends the value inside a referenced rule
        if (const std::string * ref = rules.find(value); ref && alternatives(*ref).size() == 1) {
            const std::vector<std::string> inner = items(*ref);
            if (inner.size() == 1) {
                value = inner[0];  // xml-arg-string ::= ac-20
            } else if (inner.size() == 2 && inner[0].rfind("until-", 0) == 0 && inner[1].front() == '"') {
                value = inner[0];  // ling3-arg-string ::= until-28 "</arg_value>"
                closing = inner[1];
            }
        }
        if (value.rfind("until-", 0) == 0 && (literal_follows || !closing.empty())) {
            parts[i] = closing.empty() ? choice : choice + " " + closing;
            changed = true;
        } else if (value.rfind("ac-", 0) == 0 && last) {
            if (auto text = closing_of(rules, value)) {
                parts[i] = choice + " " + literal(*text);
                changed = true;
            }
        }
    }
    if (changed) {
        std::string joined;
        for (const auto & p : parts) joined += (joined.empty() ? "" : " ") + p;
        expr = joined;
    }
    return changed;
}

// In the tagged formats (Qwen3.5/Qwen3-Coder/Nemotron "<parameter=...>", GLM/Hy3/Laguna
// "<arg_value>", MiniMax, DeepSeek DSML, Seed-OSS, Kimi-K3, ling-3) a string argument's value
// is the raw text up to the closing tag, and the chat layer leaves it free even where the
// schema lists the allowed values. Here that text becomes one of them, followed by the same
// closing: the parser reads back exactly the listed string.
void string_choices_in_tags(Rules & rules, const std::vector<Tool> & tools) {
    for (const auto & tool : tools) {
        for (const auto & arg : tool.arguments) {
            const std::vector<std::string> choices = string_choices(arg.schema);
            if (choices.empty()) continue;
            std::string alternatives_text;
            for (const auto & c : choices) alternatives_text += (alternatives_text.empty() ? "" : " | ") + literal(c);
            const std::string choice = "(" + alternatives_text + ")";
            for (const std::string & name : {rule_name("tool-" + tool.name + "-arg-" + arg.name),
                                             rule_name("kimi-k3-arg-" + tool.name + "-" + arg.name),
                                             rule_name("ling3-arg-" + tool.name + "-" + arg.name)}) {
                if (std::string * body = rules.find(name)) {
                    narrow_string_value(*body, choice, rules);
                }
            }
        }
    }
}

}  // namespace

std::string narrow_tool_grammar(const std::string & grammar, const GrammarContext & ctx) {
    if (grammar.empty()) return grammar;
    std::string text = mistral_call_ids(close_calls_tightly(grammar));
    gpt_oss(text);
    kimi_k2_index(text);
    if (text.find("<atem:function_calls>") != std::string::npos && !ctx.lazy) {
        muse_glimmer_recipient(text);
    }
    Rules rules(text);
    Additions add(rules);
    const std::vector<Tool> tools = read_tools(ctx.tools);
    if (rules.find("kimi-k3-tool-call")) {
        kimi_k3(rules, tools, ctx.parallel_tool_calls, add);
    } else if (rules.find("python-or-json-value")) {
        lfm2(rules, tools, add);
    } else if (rules.find("gemma4-dict")) {
        gemma4(rules, tools, add);
    } else {
        for (const auto & tool : tools) {  // tagged arguments (MiniCPM5, muse-glimmer, ling-3, ...)
            const std::string name = rule_name("tool-" + tool.name);
            std::vector<std::string> calls;
            for (const auto & [rule, body] : rules.list()) {
                if (rule == name || (rule.size() > name.size() && rule.compare(rule.size() - name.size() - 1,
                                                                               name.size() + 1, "-" + name) == 0)) {
                    calls.push_back(rule);
                }
            }
            for (const auto & rule : calls) order_arguments(*rules.find(rule), tool, rules, keep);
        }
    }
    string_choices_in_tags(rules, tools);
    return rules.text();
}

namespace {

std::string pattern_problem(const std::string & p) {
    if (p.size() < 2 || p.front() != '^' || p.back() != '$') {
        return "is not anchored with '^' and '$' (a grammar expresses anchored patterns only)";
    }
    for (size_t i = 0; i + 1 < p.size(); ++i) {
        if (p[i] == '\\') {
            if (p[i + 1] >= '1' && p[i + 1] <= '9') return "has a back-reference, which no grammar expresses";
            ++i;
        } else if (p[i] == '(' && p[i + 1] == '?' && i + 2 < p.size() && p[i + 2] != ':') {
            return "has a lookaround or named group, which no grammar expresses";
        }
    }
    static const std::regex backwards(R"(\{(\d+),(\d+)\})");
    for (std::sregex_iterator it(p.begin(), p.end(), backwards), end; it != end; ++it) {
        if (std::stoull((*it)[2].str().substr(0, 18)) < std::stoull((*it)[1].str().substr(0, 18))) {
            return "repeats " + it->str() + " times: the maximum is below the minimum";
        }
    }
    std::string with, without;
    try {
        with = json_schema_to_grammar(common_json{{"type", "string"}, {"pattern", p}}, true);
        without = json_schema_to_grammar(common_json{{"type", "string"}}, true);
    } catch (const std::exception & e) {
        std::string why = e.what();
        std::replace(why.begin(), why.end(), '\n', ' ');
        return "does not convert: " + why;
    }
    return with == without ? "has syntax llama.cpp's grammars do not express" : "";
}

}  // namespace

void check_json_schema(const common_json & root, const std::string & what) {
    size_t enum_values = 0;
    std::vector<const common_json *> stack{&root};
    while (!stack.empty()) {
        const common_json & node = *stack.back();
        stack.pop_back();
        if (node.is_array()) {
            for (const auto & v : node) stack.push_back(&v);
            continue;
        }
        if (!node.is_object()) continue;
        for (const auto & [key, value] : node.items()) {
            if (key == "enum" || key == "const" || key == "default" || key == "examples") continue;  // values, not schemas
            if (value.is_object() || value.is_array()) stack.push_back(&value);
        }
        if (node.contains("enum") && node.at("enum").is_array()) {
            enum_values += node.at("enum").size();
            if (enum_values > kSchemaEnumValues) {
                fail(ErrorKind::ToolSchema, what + " has over " + std::to_string(kSchemaEnumValues) +
                                                " enum values in all (the limit: every value is a grammar alternative "
                                                "checked at each token)");
            }
        }
        if (node.contains("pattern") && node.at("pattern").is_string()) {
            const std::string p = node.at("pattern").get<std::string>();
            if (const std::string why = pattern_problem(p); !why.empty()) {
                fail(ErrorKind::ToolSchema, what + ": the pattern '" + p + "' " + why + "; drop it or write one that "
                                                "is");
            }
        }
        for (const auto & [low, high] : std::vector<std::pair<const char *, const char *>>{
                 {"minimum", "maximum"}, {"exclusiveMinimum", "exclusiveMaximum"}, {"minimum", "exclusiveMaximum"},
                 {"exclusiveMinimum", "maximum"}, {"minLength", "maxLength"}, {"minItems", "maxItems"},
                 {"minProperties", "maxProperties"}}) {
            if (!node.contains(low) || !node.contains(high) || !node.at(low).is_number() || !node.at(high).is_number()) {
                continue;
            }
            const double lo = node.at(low).get<double>(), hi = node.at(high).get<double>();
            const bool strict = std::string(low).rfind("exclusive", 0) == 0 || std::string(high).rfind("exclusive", 0) == 0;
            if (lo > hi || (strict && lo >= hi)) {
                fail(ErrorKind::ToolSchema, what + " has " + low + " " + node.at(low).dump() + " above " + high + " " +
                                                node.at(high).dump() + ": no value matches");
            }
        }
        if (node.contains("$ref") && node.at("$ref").is_string()) {
            // A $ref is an alias rule: a chain of them that comes back is a rule defined by itself.
            std::vector<std::string> seen;
            const common_json * at = &node;
            while (at->is_object() && at->contains("$ref") && at->at("$ref").is_string()) {
                const std::string ref = at->at("$ref").get<std::string>();
                if (std::find(seen.begin(), seen.end(), ref) != seen.end()) {
                    std::string chain;
                    for (const auto & r : seen) chain += r + " -> ";
                    fail(ErrorKind::ToolSchema, what + " has a $ref cycle (" + chain + ref + "): no value matches");
                }
                seen.push_back(ref);
                if (ref.rfind("#/", 0) != 0) break;
                try {
                    const common_json * target = &root;
                    for (size_t from = 2; from <= ref.size();) {
                        const size_t slash = std::min(ref.find('/', from), ref.size());
                        std::string key = ref.substr(from, slash - from);
                        for (size_t t = key.find('~'); t != std::string::npos && t + 1 < key.size(); t = key.find('~', t + 1)) {
                            key.replace(t, 2, key[t + 1] == '1' ? "/" : "~");
                        }
                        target = target->is_array() ? &target->at((size_t) std::stoul(key)) : &target->at(key);
                        from = slash + 1;
                    }
                    at = target;
                } catch (const std::exception &) {
                    break;  // unresolved: json_schema_to_grammar says so
                }
            }
        }
    }
}

common_json parse_json_schema(const std::string & text, const std::string & what) {
    if (const int depth = json_depth(text); depth > kJsonDepth) {
        fail(ErrorKind::ToolSchema, what + " nests " + std::to_string(depth) + " deep, over the limit of " +
                                        std::to_string(kJsonDepth));
    }
    common_json schema;
    try {
        schema = common_json::parse(text);
    } catch (const std::exception & e) {
        fail(ErrorKind::ToolSchema, what + " is not valid JSON: " + e.what());
    }
    check_json_schema(schema, what);
    return schema;
}

}  // namespace mtp
