#include "options.hpp"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <memory>
#include <regex>
#include <set>

#include "chat_grammar.hpp"
#include "chat_sampling.hpp"
#include "gbnf.hpp"
#include "errors.hpp"
#include "ggml.h"
#include "json-schema-to-grammar.h"
#include "llama-grammar.h"  // llama_grammar_parser: a grammar's syntax error with its reason
#include "runtime.hpp"

namespace mtp {

int32_t cache_type(const std::optional<std::string> & name, const char * option) {
    if (!name) return -1;
    for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
        const auto * traits = ggml_get_type_traits((ggml_type) t);
        if (traits->blck_size != 0 && traits->type_name != nullptr && *name == traits->type_name) {
            return t;
        }
    }
    fail(ErrorKind::InvalidOption, std::string(option) + " is not a ggml type name (got '" + *name + "')");
}

bool is_auto(const DraftLength & n) { return std::holds_alternative<std::string>(n); }

int32_t longest_draft(const ContextOptions & o) {
    return is_auto(o.n_draft) ? o.n_draft_max : std::get<int32_t>(o.n_draft);
}

namespace {

void check_draft_length(const DraftLength & n, int32_t max_draft, const char * what) {
    if (const auto * s = std::get_if<std::string>(&n)) {
        if (*s != "auto") {
            fail(ErrorKind::InvalidOption, std::string(what) + " must be an integer or 'auto' (got '" + *s + "')");
        }
        return;
    }
    const int32_t k = std::get<int32_t>(n);
    if (k < 0 || k > max_draft) {
        fail(ErrorKind::InvalidOption, std::string(what) + " must be 'auto' or between 0 and " +
                                           std::to_string(max_draft) + " (got " + std::to_string(k) + "); 2-4 is typical");
    }
}

void check_p_min(float p_min) {
    if (!(p_min >= 0.0f && p_min <= 1.0f)) {
        fail(ErrorKind::InvalidOption, "p_min must be in [0, 1] (0 = draft regardless of confidence)");
    }
}

}  // namespace

void validate(const ContextOptions & o, int32_t max_draft) {
    check_draft_length(o.n_draft, max_draft, "n_draft");
    if (o.n_draft_max < 1 || o.n_draft_max > max_draft) {
        fail(ErrorKind::InvalidOption, "n_draft_max must be between 1 and " + std::to_string(max_draft) + " (got " +
                                           std::to_string(o.n_draft_max) + ")");
    }
    check_p_min(o.p_min);
    if (!(o.cache_size_mb >= 0.0) || std::isinf(o.cache_size_mb)) {
        fail(ErrorKind::InvalidOption, "cache_size_mb must be a number of megabytes >= 0 (0 = keep only the current conversation)");
    }
    if (o.n_parallel <= 1 && o.n_ctx < kMinSlotContext) {
        // llama.cpp would round it up to 256 cells without a word.
        fail(ErrorKind::InvalidOption, "n_ctx=" + std::to_string(o.n_ctx) + " is below " +
                                           std::to_string(kMinSlotContext) +
                                           " tokens, the least context llama.cpp gives a session (it sizes the cache "
                                           "in steps of " + std::to_string(kMinSlotContext) + "): pass n_ctx >= " +
                                           std::to_string(kMinSlotContext));
    }
    if (o.n_batch < 2) {
        // llama.cpp decodes two tokens at once to learn how a context rolls back (and aborts on a smaller batch)
        fail(ErrorKind::InvalidOption, "n_batch must be at least 2 (got " + std::to_string(o.n_batch) + ")");
    }
    if (o.n_batch <= longest_draft(o)) {
        fail(ErrorKind::InvalidOption, "n_batch must be greater than n_draft (the verify batch holds n_draft + 1 tokens)");
    }
    if (o.n_parallel < 1 || o.n_parallel > kMaxParallel) {
        fail(ErrorKind::InvalidOption, "n_parallel must be between 1 and " + std::to_string(kMaxParallel) + " (got " +
                                           std::to_string(o.n_parallel) + ")");
    }
    if (o.n_parallel > 1 && o.n_ctx / o.n_parallel < kMinSlotContext) {
        fail(ErrorKind::InvalidOption,
             "n_parallel=" + std::to_string(o.n_parallel) + " needs n_ctx >= " + std::to_string(o.n_parallel * kMinSlotContext) +
                 " (each slot holds n_ctx / n_parallel tokens, at least " + std::to_string(kMinSlotContext) +
                 "); got n_ctx=" + std::to_string(o.n_ctx) + ": at most n_parallel=" +
                 std::to_string(std::max(1, o.n_ctx / kMinSlotContext)) + " fits, or raise n_ctx");
    }
    if (o.n_batch < o.n_parallel * (longest_draft(o) + 1)) {
        fail(ErrorKind::InvalidOption,
             "n_batch must be at least n_parallel * (n_draft + 1) = " + std::to_string(o.n_parallel * (longest_draft(o) + 1)) +
                 " (one verify batch holds every slot's drafts); got " + std::to_string(o.n_batch));
    }
    if ((o.n_threads && *o.n_threads < 1) || (o.n_threads_batch && *o.n_threads_batch < 1)) {
        fail(ErrorKind::InvalidOption, "n_threads and n_threads_batch must be positive (unset = all cores)");
    }
    cache_type(o.type_k, "type_k");
    cache_type(o.type_v, "type_v");
    if (std::none_of(kRollbackModes.begin(), kRollbackModes.end(), [&](const char * m) { return o.rollback == m; })) {
        fail(ErrorKind::InvalidOption, "rollback must be 'auto', 'rs' or 'checkpoint' (got '" + o.rollback + "')");
    }
}

void validate(const GenerateOptions & g, int32_t session_longest_draft) {
    const auto & s = g.sampling;
    if (g.max_tokens < 1) {
        fail(ErrorKind::InvalidOption, "max_tokens must be at least 1 (got " + std::to_string(g.max_tokens) + ")");
    }
    if (g.n_draft) {
        check_draft_length(*g.n_draft, session_longest_draft, "per-call n_draft (bounded by the session's longest draft)");
    }
    if (g.top_logprobs < 0 || g.top_logprobs > kMaxTopLogprobs) {
        fail(ErrorKind::InvalidOption, "top_logprobs must be between 0 and " + std::to_string(kMaxTopLogprobs) +
                                           " (got " + std::to_string(g.top_logprobs) + ")");
    }
    if (g.timeout && (!(*g.timeout > 0.0) || std::isinf(*g.timeout))) {
        fail(ErrorKind::InvalidOption, "timeout must be a positive number of seconds or None");
    }
    if (!std::isfinite(s.temp) || s.temp < 0.0f) {
        fail(ErrorKind::InvalidOption, "temp must be a finite number >= 0 (0 = greedy)");
    }
    if (g.draft_temp && (!std::isfinite(*g.draft_temp) || *g.draft_temp < 0.0f)) {
        fail(ErrorKind::InvalidOption, "draft_temp must be a finite number >= 0 (0 = the head's argmax) or None");
    }
    if (s.top_k < 0) {
        fail(ErrorKind::InvalidOption, "top_k must be >= 0 (0 = whole vocabulary)");
    }
    if (!(s.top_p >= 0.0f && s.top_p <= 1.0f)) {
        fail(ErrorKind::InvalidOption, "top_p must be in [0, 1]");
    }
    if (!(s.min_p >= 0.0f && s.min_p <= 1.0f)) {
        fail(ErrorKind::InvalidOption, "min_p must be in [0, 1]");
    }
    if (!std::isfinite(s.repeat_penalty) || s.repeat_penalty <= 0.0f) {
        fail(ErrorKind::InvalidOption, "repeat_penalty must be a finite number > 0 (1.0 = off)");
    }
    if (!std::isfinite(s.frequency_penalty) || !std::isfinite(s.presence_penalty)) {
        fail(ErrorKind::InvalidOption, "frequency_penalty and presence_penalty must be finite");
    }
    if (s.reasoning_budget < -1) {
        fail(ErrorKind::InvalidOption, "reasoning_budget must be -1 (unlimited), 0 (no reasoning) or a number of "
                                       "reasoning tokens N > 0 (got " + std::to_string(s.reasoning_budget) + ")");
    }
    if (s.penalty_last_n < -1) {
        fail(ErrorKind::InvalidOption, "penalty_last_n must be >= -1 (-1 = whole context)");
    }
    for (const auto & stop : g.stop) {
        if (stop.empty()) {
            fail(ErrorKind::InvalidOption, "stop strings must not be empty");
        }
        if (stop.size() > 1024) {
            fail(ErrorKind::InvalidOption, "stop strings must be at most 1024 bytes");
        }
    }
    if (g.stop.size() > 64) {
        fail(ErrorKind::InvalidOption, "at most 64 stop strings are supported");
    }
}

// "auto" is llama.cpp's choice (flash attention wherever the backend has it), and on a
// CPU-only build it is on: there it is the only attention path that computes a query row
// the same way in a one-row pass and in a verify batch (ggml's CPU kernel works row by
// row; without it the KQ and KQV products are multi-column matmuls whose rounding follows
// the batch). Without that, greedy MTP on SmolLM2 equals plain decoding on 1 of 20
// held-out answers; with it, 20 of 20, and plain decoding is faster there too
// (benchmarks/flash_attention.py: 141 against 118 tokens/s at 128 tokens). A quantized V
// cache leaves it to llama.cpp, which turns it on where the head size allows.
llama_flash_attn_type resolve_flash_attn(const ContextOptions & o) {
    if (o.flash_attn) {
        return *o.flash_attn ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    }
    const int32_t type_v = cache_type(o.type_v, "type_v");
    const bool quantized_v = type_v >= 0 && ggml_is_quantized((ggml_type) type_v);
    return has_accelerator() || quantized_v ? LLAMA_FLASH_ATTN_TYPE_AUTO : LLAMA_FLASH_ATTN_TYPE_ENABLED;
}

namespace {

// Where llama.cpp's parser stopped, from its message ("expecting ')' at <the rest of the text>"):
// "expecting ')' at line 1, column 15, the end of the grammar".
std::string locate_grammar_error(const std::string & what, const std::string & text) {
    const size_t at = what.find(" at ");
    if (at == std::string::npos) {
        return what;
    }
    const std::string rest = what.substr(at + 4);
    if (rest.size() > text.size() || text.compare(text.size() - rest.size(), rest.size(), rest) != 0) {
        return what;
    }
    const size_t offset = text.size() - rest.size();
    const size_t line_start = text.rfind('\n', offset == 0 ? 0 : offset - 1);
    const size_t line = 1 + (size_t) std::count(text.begin(), text.begin() + (std::ptrdiff_t) offset, '\n');
    const size_t column = offset - (line_start == std::string::npos || offset == 0 ? 0 : line_start + 1) + 1;
    std::string where = what.substr(0, at) + " at line " + std::to_string(line) + ", column " + std::to_string(column);
    const std::string next = rest.substr(0, std::min(rest.find_first_of("\r\n"), (size_t) 20));
    return where + (rest.empty() ? ", the end of the grammar" : next.empty() ? ", the end of the line" : ", before '" + next + "'");
}

// The parse states llama.cpp reaches when a reference to `rule` is on top of its stack, counted
// as its llama_grammar_advance_stack expands them (each distinct stack once), up to `cap` + 1.
// kLeftRecursive when a stack grows deeper than there are rules: some rule reaches itself before
// any text with a continuation pending, and llama.cpp would expand it without end (its own check
// misses it when the way passes rules that match nothing only through other rules). Marks each
// rule it enters in `entered` (entering one of them alone reaches no more states), and counts the
// stack elements it copies in `work`.
constexpr size_t kLeftRecursive = SIZE_MAX;

size_t grammar_states_from(const llama_grammar_rules & rules, uint32_t rule, size_t cap, std::vector<char> & entered,
                           size_t & work) {
    const llama_grammar_element top[2] = {{LLAMA_GRETYPE_RULE_REF, rule}, {LLAMA_GRETYPE_END, 0}};
    auto is_end = [](const llama_grammar_element * e) {
        return e->type == LLAMA_GRETYPE_END || e->type == LLAMA_GRETYPE_ALT;
    };
    auto before = [](const llama_grammar_stack & a, const llama_grammar_stack & b) {
        return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(),
                                            std::less<const llama_grammar_element *>());
    };
    std::set<llama_grammar_stack, decltype(before)> seen(before);
    std::vector<llama_grammar_stack> todo = {{&top[0]}};
    while (!todo.empty() && seen.size() <= cap && work <= kGrammarCheckWork) {
        llama_grammar_stack stack = std::move(todo.back());
        todo.pop_back();
        if (stack.size() > rules.size() + 1) {
            return kLeftRecursive;
        }
        if (stack.empty() || stack.back()->type != LLAMA_GRETYPE_RULE_REF || !seen.insert(stack).second) {
            continue;  // a finished or terminal stack is one state; nothing to expand
        }
        const llama_grammar_element * pos = stack.back();
        entered[pos->value] = 1;
        for (const llama_grammar_element * alt = rules[pos->value].data();; ++alt) {
            llama_grammar_stack next(stack.begin(), stack.end() - 1);
            if (!is_end(pos + 1)) next.push_back(pos + 1);
            if (!is_end(alt)) next.push_back(alt);
            work += next.size() + 1;
            todo.push_back(std::move(next));
            while (!is_end(alt)) ++alt;
            if (alt->type != LLAMA_GRETYPE_ALT) break;
        }
    }
    return seen.size();
}

// Whether some character can start the parsed grammar (or it accepts the empty text): a stack
// of its initial state whose next element is a character class that matches any code point.
// Checked once per call, before generation: llama.cpp's sampler would throw mid-generation.
bool grammar_can_start(const llama_grammar_parser & parser, const llama_vocab * vocab) {
    const auto root = parser.symbol_ids.find("root");
    if (root == parser.symbol_ids.end()) {
        return true;
    }
    llama_grammar_stack rules = parser.c_rules();
    std::unique_ptr<llama_grammar, void (*)(llama_grammar *)> grammar(
        llama_grammar_init_impl(vocab, rules.data(), rules.size(), root->second), llama_grammar_free_impl);
    if (!grammar) {
        return true;  // the sampler reports what is wrong
    }
    for (const llama_grammar_stack & stack : grammar->stacks) {
        if (stack.empty()) {
            return true;
        }
        const llama_grammar_element * pos = stack.back();
        if (pos->type != LLAMA_GRETYPE_CHAR) {
            return true;  // a negated class, any character, a token: something matches
        }
        for (; pos->type == LLAMA_GRETYPE_CHAR || pos->type == LLAMA_GRETYPE_CHAR_ALT ||
               pos->type == LLAMA_GRETYPE_CHAR_RNG_UPPER;
             ++pos) {
            const bool range = pos[1].type == LLAMA_GRETYPE_CHAR_RNG_UPPER;
            if (!range || pos->value <= pos[1].value) {
                return true;
            }
            ++pos;  // the range's upper bound
        }
    }
    return false;
}

// A GBNF grammar's syntax error with llama.cpp's reason, found before its sampler parses the text
// (which prints the reason to stderr and throws only "failed to parse grammar").
void check_grammar_syntax(const std::string & text, const llama_vocab * vocab, bool needs_root) {
    if (text.compare(0, 11, "%llguidance") == 0) {
        return;
    }
    check_grammar_bounds(text);
    llama_grammar_parser parser(vocab);
    auto space = [](const char * pos) {  // llama-grammar.cpp's parse_space: blanks, newlines, # comments
        while (*pos == ' ' || *pos == '\t' || *pos == '\r' || *pos == '\n' || *pos == '#') {
            if (*pos == '#') {
                while (*pos && *pos != '\r' && *pos != '\n') ++pos;
            } else {
                ++pos;
            }
        }
        return pos;
    };
    std::string why;
    try {
        for (const char * pos = space(text.c_str()); *pos;) {
            pos = parser.parse_rule(pos);
        }
    } catch (const std::exception & e) {
        why = locate_grammar_error(e.what(), text);
    }
    for (const auto & [name, id] : parser.symbol_ids) {
        if (why.empty() && (id >= parser.rules.size() || parser.rules[id].empty())) {
            why = "rule '" + name + "' is used but not defined";
        }
    }
    if (why.empty() && needs_root && parser.symbol_ids.count("root") == 0) {
        why = "it has no 'root' rule (generation starts at root ::= ...)";
    }
    if (!why.empty()) {
        fail(ErrorKind::Grammar, "the grammar does not parse: " + why + "; fix the GBNF grammar");
    }
    size_t work = 0;
    std::vector<char> entered(parser.rules.size());
    for (uint32_t rule = 0; rule < parser.rules.size(); ++rule) {
        if (entered[rule] || parser.rules[rule].empty()) {
            continue;
        }
        const size_t states = grammar_states_from(parser.rules, rule, kGrammarStates, entered, work);
        if (work > kGrammarCheckWork) {
            fail(ErrorKind::Grammar, "the grammar is too large to check: its rules expand into over " +
                                         std::to_string(kGrammarCheckWork) + " parse-stack elements; simplify the "
                                         "grammar");
        }
        auto name = [&] {
            const auto named = std::find_if(parser.symbol_ids.begin(), parser.symbol_ids.end(),
                                            [&](const auto & entry) { return entry.second == rule; });
            return named == parser.symbol_ids.end() ? std::string("?") : named->first;
        };
        if (states == kLeftRecursive) {
            fail(ErrorKind::Grammar, "the grammar is left-recursive: from rule '" + name() + "' a rule reaches itself "
                                     "before matching any text (through rules that can match nothing), so its "
                                     "parse never ends; start each repetition with text");
        }
        if (states > kGrammarStates) {
            fail(ErrorKind::Grammar, "the grammar is too ambiguous: entering rule '" + name() + "' gives over " +
                                         std::to_string(kGrammarStates) + " parse states, each expanded at every "
                                         "token (repetitions nested around something that can match nothing, as in "
                                         "((\"\")+)+ or (\"a\"?)**); simplify the grammar");
        }
    }
    if (needs_root && !grammar_can_start(parser, vocab)) {
        fail(ErrorKind::Grammar, "no text can start the grammar: every way into its root rule begins with a "
                                 "character class that matches nothing (an empty range such as [z-a]); fix the "
                                 "GBNF grammar");
    }
}

}  // namespace

common_params_sampling to_common_params(const SamplingOptions & s, const llama_vocab * vocab) {
    common_params_sampling sp;
    sp.temp = s.temp;
    sp.top_k = s.top_k;
    sp.top_p = s.top_p;
    sp.min_p = s.min_p;
    sp.seed = s.seed;
    sp.penalty_repeat = s.repeat_penalty;
    sp.penalty_freq = s.frequency_penalty;
    sp.penalty_present = s.presence_penalty;
    sp.penalty_last_n = s.penalty_last_n;
    sp.no_perf = true;
    if (s.grammar && !s.grammar->empty()) {
        check_grammar_syntax(*s.grammar, vocab, !s.chat);
        const bool drop_reasoning = s.chat && !s.chat->lazy && s.reasoning_budget == 0;
        std::string grammar = drop_reasoning ? without_reasoning(*s.grammar, *s.chat) : *s.grammar;
        if (s.chat) {
            grammar = reasoning_tag_in_its_tokens(grammar, *s.chat, vocab);
        }
        sp.grammar = common_grammar(s.chat ? COMMON_GRAMMAR_TYPE_TOOL_CALLS : COMMON_GRAMMAR_TYPE_USER, grammar);
    }
    if (s.chat) {
        apply_chat_grammar(*s.chat, s.reasoning_budget, vocab, sp);
    }
    return sp;
}

llama_context_params to_context_params(const ContextOptions & o) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) o.n_ctx;
    cp.n_batch = (uint32_t) o.n_batch;
    cp.n_ubatch = (uint32_t) o.n_batch;
    cp.n_seq_max = (uint32_t) o.n_parallel;
    cp.kv_unified = false;  // each slot its own n_ctx / n_parallel cells: one call cannot fill another's
    // More threads than the machine runs only wait for each other (mtp_llm.MTP warns and clamps first).
    cp.n_threads = std::min(o.n_threads.value_or(default_threads()), default_threads());
    cp.n_threads_batch = std::min(o.n_threads_batch.value_or(cp.n_threads), default_threads());
    cp.flash_attn_type = resolve_flash_attn(o);
    if (const int32_t t = cache_type(o.type_k, "type_k"); t >= 0) cp.type_k = (ggml_type) t;
    if (const int32_t t = cache_type(o.type_v, "type_v"); t >= 0) cp.type_v = (ggml_type) t;
    cp.offload_kqv = o.offload_kqv;
    cp.no_perf = true;
    cp.n_outputs_max = 0;
    return cp;
}

std::string json_schema_grammar(const std::string & schema_json) {
    try {
        return json_schema_to_grammar(parse_json_schema(schema_json, "the JSON schema"));
    } catch (const Error &) {
        throw;
    } catch (const std::exception & e) {
        fail(ErrorKind::InvalidOption, std::string("cannot turn the JSON schema into a grammar: ") + e.what());
    }
}

}  // namespace mtp
