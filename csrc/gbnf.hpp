// A small toolkit for GBNF text as llama.cpp's chat layer writes it: rules one a line,
// the items and alternatives of an expression, literals, rule references, renaming.
// chat_grammar.cpp narrows the chat layer's grammars with it; options.cpp and chat.cpp
// edit root rules.
#pragma once

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace mtp::gbnf {

// A grammar's rules, one a line as the chat layer's build_grammar writes them.
class Rules {
public:
    explicit Rules(const std::string & text) {
        for (size_t at = 0; at < text.size();) {
            const size_t end = std::min(text.find('\n', at), text.size());
            const std::string line = text.substr(at, end - at);
            const size_t defined = line.find(" ::= ");
            if (defined != std::string::npos) {
                list_.emplace_back(line.substr(0, defined), line.substr(defined + 5));
            } else if (!line.empty()) {
                list_.emplace_back("", line);  // kept as it is
            }
            at = end + 1;
        }
    }

    std::string * find(const std::string & name) {
        for (auto & [n, body] : list_) {
            if (n == name) return &body;
        }
        return nullptr;
    }

    void add(const std::string & name, const std::string & body) { list_.emplace_back(name, body); }

    const std::deque<std::pair<std::string, std::string>> & list() const { return list_; }

    std::string text() const {
        std::string out;
        for (const auto & [name, body] : list_) {
            out += name.empty() ? body : name + " ::= " + body;
            out += '\n';
        }
        return out;
    }

private:
    std::deque<std::pair<std::string, std::string>> list_;  // added rules keep the others' addresses
};

// The end of the atom at s[i]: a literal, a character class, a group, a token, a rule name.
size_t atom_end(const std::string & s, size_t i);

// The end of the item at s[i]: an atom and its repetition suffixes.
size_t item_end(const std::string & s, size_t i);

std::string trim(const std::string & s);

// The top-level items of a sequence, with their positions.
std::vector<std::pair<size_t, size_t>> item_spans(const std::string & s);

std::vector<std::string> items(const std::string & s);

// The top-level alternatives of an expression.
std::vector<std::string> alternatives(const std::string & s);

bool is_group(const std::string & item);
// A group's expression without its parentheses.
std::string group_inner(const std::string & group);

// The literals of an expression, at any depth.
std::vector<std::string> literals(const std::string & s);

// The rule names an expression refers to.
std::vector<std::string> rule_refs(const std::string & s);

// Every rule name of `names` in an expression renamed.
std::string rename(const std::string & s, const std::map<std::string, std::string> & names);

// As the chat layer names its rules (common_peg_parser_builder::rule).
std::string rule_name(const std::string & name);
// `text` as a GBNF string literal.
std::string literal(const std::string & text);

}  // namespace mtp::gbnf

namespace mtp {

// Bounds on a GBNF grammar before llama.cpp's parser (which recurses on each group) and sampler
// (which expands x{m,n} into copies) read it: size, group nesting, rules, alternatives, elements
// once expanded, and no x{m,n} with n < m (which hangs its expansion).
inline constexpr size_t kGrammarBytes = 4u << 20;
inline constexpr int kGrammarNesting = 200;
inline constexpr size_t kGrammarRules = 10000;
inline constexpr size_t kGrammarAlternatives = 5000;
inline constexpr double kGrammarElements = 1e6;
// Parse states (stacks) llama.cpp's sampler may hold at once: it expands every one at every token,
// and nested repetitions of something that can match nothing, (("")+)+..., make 2^depth of them.
inline constexpr size_t kGrammarStates = 20000;
// Work (stack elements copied) the check of those states may do, for every rule together.
inline constexpr size_t kGrammarCheckWork = 10000000;

// A GrammarError naming the bound `text` exceeds; nothing when within them.
void check_grammar_bounds(const std::string & text);

// The grammar with its root rule's line ("root ::= ...") replaced by `edit` of it; a grammar
// without a root rule is returned as it is.
std::string edit_root_rule(const std::string & grammar, const std::function<std::string(const std::string &)> & edit);

}  // namespace mtp
