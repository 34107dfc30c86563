#include "gbnf.hpp"

#include <algorithm>
#include <cctype>
#include <regex>

#include "errors.hpp"
#include "json-schema-to-grammar.h"

namespace mtp::gbnf {

static bool is_name_char(char c) { return std::isalnum((unsigned char) c) || c == '-' || c == '_'; }

// The end of the atom at s[i]: a literal, a character class, a group, a token, a rule name.
size_t atom_end(const std::string & s, size_t i) {
    const char c = s[i];
    if (c == '"' || c == '[') {
        const char close = c == '"' ? '"' : ']';
        for (++i; i < s.size() && s[i] != close;) i += s[i] == '\\' ? 2 : 1;
        return std::min(i + 1, s.size());
    }
    if (c == '(') {
        int depth = 0;
        while (i < s.size()) {
            if (s[i] == '"' || s[i] == '[') {
                i = atom_end(s, i);
                continue;
            }
            if (s[i] == '(') ++depth;
            if (s[i] == ')' && --depth == 0) return i + 1;
            ++i;
        }
        return s.size();
    }
    if (c == '<' || (c == '!' && i + 1 < s.size() && s[i + 1] == '<')) {
        return std::min(s.find('>', i), s.size() - 1) + 1;
    }
    if (!is_name_char(c)) return i + 1;  // "." and stray characters
    while (i < s.size() && is_name_char(s[i])) ++i;
    return i;
}

// The end of the item at s[i]: an atom and its repetition suffixes.
size_t item_end(const std::string & s, size_t i) {
    size_t e = atom_end(s, i);
    while (e < s.size()) {
        if (s[e] == '*' || s[e] == '+' || s[e] == '?') {
            ++e;
        } else if (s[e] == '{') {
            e = std::min(s.find('}', e), s.size() - 1) + 1;
        } else {
            break;
        }
    }
    return e;
}

std::string trim(const std::string & s) {
    const size_t a = s.find_first_not_of(' ');
    return a == std::string::npos ? "" : s.substr(a, s.find_last_not_of(' ') - a + 1);
}

// The top-level items of a sequence, with their positions.
std::vector<std::pair<size_t, size_t>> item_spans(const std::string & s) {
    std::vector<std::pair<size_t, size_t>> out;
    for (size_t i = 0; i < s.size();) {
        if (s[i] == ' ') {
            ++i;
            continue;
        }
        const size_t e = item_end(s, i);
        out.emplace_back(i, e);
        i = e;
    }
    return out;
}

std::vector<std::string> items(const std::string & s) {
    std::vector<std::string> out;
    for (auto [a, e] : item_spans(s)) out.push_back(s.substr(a, e - a));
    return out;
}

// The top-level alternatives of an expression.
std::vector<std::string> alternatives(const std::string & s) {
    std::vector<std::string> out;
    size_t from = 0;
    for (size_t i = 0; i < s.size();) {
        if (s[i] == '|') {
            out.push_back(trim(s.substr(from, i - from)));
            from = ++i;
        } else if (s[i] == ' ') {
            ++i;
        } else {
            i = item_end(s, i);
        }
    }
    out.push_back(trim(s.substr(from)));
    return out;
}

bool is_group(const std::string & item) {
    return item.size() >= 2 && item.front() == '(' && atom_end(item, 0) == item.size();
}

std::string group_inner(const std::string & group) { return trim(group.substr(1, group.size() - 2)); }

// The literals of an expression, at any depth.
std::vector<std::string> literals(const std::string & s) {
    std::vector<std::string> out;
    for (size_t i = 0; i < s.size();) {
        if (s[i] == '"' || s[i] == '[') {
            const size_t e = atom_end(s, i);
            if (s[i] == '"') out.push_back(s.substr(i, e - i));
            i = e;
        } else {
            ++i;
        }
    }
    return out;
}

// The rule names an expression refers to.
std::vector<std::string> rule_refs(const std::string & s) {
    std::vector<std::string> out;
    for (size_t i = 0; i < s.size();) {
        if (s[i] == '"' || s[i] == '[' || s[i] == '<') {
            i = atom_end(s, i);
        } else if (std::isalpha((unsigned char) s[i])) {
            size_t e = i;
            while (e < s.size() && is_name_char(s[e])) ++e;
            out.push_back(s.substr(i, e - i));
            i = e;
        } else {
            ++i;
        }
    }
    return out;
}

// Every rule name of `names` in an expression renamed.
std::string rename(const std::string & s, const std::map<std::string, std::string> & names) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
        const char c = s[i];
        if (c == '"' || c == '[' || c == '<') {
            const size_t e = atom_end(s, i);
            out.append(s, i, e - i);
            i = e;
        } else if (is_name_char(c)) {
            size_t e = i;
            while (e < s.size() && is_name_char(s[e])) ++e;
            const std::string word = s.substr(i, e - i);
            const auto it = names.find(word);
            out += it == names.end() ? word : it->second;
            i = e;
        } else {
            out += c;
            ++i;
        }
    }
    return out;
}

// As the chat layer names its rules (common_peg_parser_builder::rule).
std::string rule_name(const std::string & name) {
    static const std::regex invalid("[^a-zA-Z0-9-]+");
    return std::regex_replace(name, invalid, "-");
}

std::string literal(const std::string & text) { return gbnf_format_literal(text); }

}  // namespace mtp::gbnf

namespace mtp {

std::string edit_root_rule(const std::string & grammar, const std::function<std::string(const std::string &)> & edit) {
    size_t start = grammar.compare(0, 9, "root ::= ") == 0 ? 0 : grammar.find("\nroot ::= ");
    if (start == std::string::npos) {
        return grammar;
    }
    start += start == 0 ? 0 : 1;
    const size_t end = std::min(grammar.find('\n', start), grammar.size());
    return grammar.substr(0, start) + edit(grammar.substr(start, end - start)) + grammar.substr(end);
}

void check_grammar_bounds(const std::string & text) {
    auto too = [](const std::string & what) {
        fail(ErrorKind::Grammar, "the grammar " + what + "; simplify the grammar");
    };
    if (text.size() > kGrammarBytes) {
        too("is " + std::to_string(text.size()) + " bytes, over the limit of " + std::to_string(kGrammarBytes));
    }
    struct Frame {
        double total = 0;  // elements of the group once its repetitions are expanded
        double last = 0;   // elements of its last item
    };
    std::vector<Frame> frames(1);
    size_t rules = 0, alternatives = 0;
    auto item = [&](double size) {
        frames.back().total += size;
        frames.back().last = size;
    };
    for (size_t i = 0; i < text.size();) {
        const char c = text[i];
        if (c == '#') {
            while (i < text.size() && text[i] != '\n' && text[i] != '\r') ++i;
        } else if (c == '"' || c == '[') {
            const char close = c == '"' ? '"' : ']';
            size_t chars = 0;
            for (++i; i < text.size() && text[i] != close; ++chars) i += text[i] == '\\' ? 2 : 1;
            ++i;
            item(c == '"' ? (double) std::max<size_t>(chars, 1) : 1.0);
        } else if (c == '(') {
            if ((int) frames.size() > kGrammarNesting) {
                too("nests groups over " + std::to_string(kGrammarNesting) + " deep");
            }
            frames.emplace_back();
            ++i;
        } else if (c == ')') {
            if (frames.size() > 1) {
                const double size = frames.back().total;
                frames.pop_back();
                item(size);
            }
            ++i;
        } else if (c == '{') {
            double low = 0, high = -1;
            size_t j = i + 1;
            auto number = [&](double & out) {
                bool any = false;
                for (out = 0; j < text.size() && std::isdigit((unsigned char) text[j]); ++j, any = true) {
                    out = std::min(out * 10 + (text[j] - '0'), 1e15);
                }
                return any;
            };
            while (j < text.size() && text[j] == ' ') ++j;
            number(low);
            while (j < text.size() && text[j] == ' ') ++j;
            if (j < text.size() && text[j] == ',') {
                ++j;
                while (j < text.size() && text[j] == ' ') ++j;
                if (!number(high)) high = low + 1;
            } else {
                high = low;
            }
            if (high >= 0 && high < low) {
                too("repeats an item {" + std::to_string((long long) low) + "," + std::to_string((long long) high) +
                    "} times: the maximum is below the minimum");
            }
            const double copies = std::max({low, high, 1.0});
            Frame & f = frames.back();
            f.total += f.last * (copies - 1);
            f.last *= copies;
            i = j;
        } else if (c == '|') {
            if (++alternatives > kGrammarAlternatives) {
                too("has over " + std::to_string(kGrammarAlternatives) + " alternatives (each is a parse llama.cpp "
                    "advances at every token)");
            }
            ++i;
        } else if (c == ':' && text.compare(i, 3, "::=") == 0) {
            if (++rules > kGrammarRules) {
                too("has over " + std::to_string(kGrammarRules) + " rules");
            }
            i += 3;
        } else if (gbnf::is_name_char(c)) {
            while (i < text.size() && gbnf::is_name_char(text[i])) ++i;
            item(1);
        } else {
            ++i;
        }
        if (frames.back().total > kGrammarElements || frames.front().total > kGrammarElements) {
            too("expands to over " + std::to_string((long long) kGrammarElements) + " elements (x{m,n} makes n "
                "copies of x)");
        }
    }
}

}  // namespace mtp
