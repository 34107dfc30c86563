#include "engine.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <thread>

#include "chat.h"
#include "json-schema-to-grammar.h"
#include "gguf.h"
#include "log.h"
#include "llama-ext.h"

namespace mtp {

namespace {

int64_t now_us() { return ggml_time_us(); }

int32_t default_threads() {
    const unsigned hc = std::thread::hardware_concurrency();
    return hc == 0 ? 4 : (int32_t) hc;
}

// ---------------------------------------------------------------- logging --

std::mutex g_log_mutex;
std::deque<std::string> g_log_lines;
std::string g_log_partial;
std::atomic<bool> g_log_echo{false};

void log_callback(ggml_log_level level, const char * text, void *) {
    if (g_log_echo.load(std::memory_order_relaxed)) {
        std::fputs(text, stderr);
    }
    if (level == GGML_LOG_LEVEL_DEBUG) {
        return;
    }
    std::lock_guard<std::mutex> lock(g_log_mutex);
    g_log_partial += text;
    size_t pos;
    while ((pos = g_log_partial.find('\n')) != std::string::npos) {
        g_log_lines.push_back(g_log_partial.substr(0, pos));
        g_log_partial.erase(0, pos + 1);
        if (g_log_lines.size() > 8) {
            g_log_lines.pop_front();
        }
    }
}

void clear_log() {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    g_log_lines.clear();
    g_log_partial.clear();
}

struct BackendInit {
    BackendInit() {
        llama_log_set(log_callback, nullptr);
        common_log_set_verbosity_thold(std::getenv("MTP_LLM_VERBOSE") ? LOG_LEVEL_INFO : -1);
        g_log_echo.store(std::getenv("MTP_LLM_VERBOSE") != nullptr);
        llama_backend_init();
    }
};

void ensure_backend() {
    static BackendInit init;
    (void) init;
}

bool has_accelerator() {
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        const auto type = ggml_backend_dev_type(ggml_backend_dev_get(i));
        if (type == GGML_BACKEND_DEVICE_TYPE_GPU || type == GGML_BACKEND_DEVICE_TYPE_IGPU) return true;
    }
    return false;
}

// "auto" is llama.cpp's choice (flash attention wherever the backend has it)
// except on a CPU-only build: ggml's CPU flash-attention kernel walks the KV
// cache once per query row, so a verify batch of n_draft + 1 rows pays it
// n_draft + 1 times; without it the KQ product is one matmul. Measured on the
// default model (benchmarks/flash_attention.py): off is 1.09-1.50x faster for
// plain decoding and 1.14-1.77x for MTP n_draft=2 at 128-512 tokens.
// A quantized V cache needs flash attention, so it keeps it.
llama_flash_attn_type resolve_flash_attn(const ContextOptions & o) {
    if (o.flash_attn >= 0) return (llama_flash_attn_type) o.flash_attn;
    const bool quantized_v = o.type_v >= 0 && ggml_is_quantized((ggml_type) o.type_v);
    if (!has_accelerator() && !quantized_v) return LLAMA_FLASH_ATTN_TYPE_DISABLED;
    return LLAMA_FLASH_ATTN_TYPE_AUTO;
}

std::string with_log(const std::string & msg) {
    std::string log = recent_log();
    return log.empty() ? msg : msg + "\nllama.cpp said:\n" + log;
}

bool is_valid_utf8_prefix_char(unsigned char c, int & len) {
    if (c < 0x80) { len = 1; return true; }
    if ((c & 0xE0) == 0xC0 && c >= 0xC2) { len = 2; return true; }
    if ((c & 0xF0) == 0xE0) { len = 3; return true; }
    if ((c & 0xF8) == 0xF0 && c <= 0xF4) { len = 4; return true; }
    return false;
}

// Splits `s` into a valid UTF-8 prefix (invalid bytes replaced by U+FFFD) and
// an incomplete tail that may still be completed by later bytes.
std::string take_valid_utf8(std::string & s, bool final_flush) {
    static const char kReplacement[] = "\xEF\xBF\xBD";
    std::string out;
    out.reserve(s.size());
    size_t i = 0;
    while (i < s.size()) {
        const unsigned char c = (unsigned char) s[i];
        int len = 0;
        if (!is_valid_utf8_prefix_char(c, len)) {
            out += kReplacement;
            ++i;
            continue;
        }
        if (i + len > s.size()) {
            // Incomplete: valid so far? Then hold it back (unless flushing).
            bool ok = true;
            for (size_t j = i + 1; j < s.size(); ++j) {
                ok = ok && (((unsigned char) s[j]) & 0xC0) == 0x80;
            }
            if (ok && !final_flush) {
                break;
            }
            out += kReplacement;
            ++i;
            continue;
        }
        bool ok = true;
        for (int j = 1; j < len; ++j) {
            ok = ok && (((unsigned char) s[i + j]) & 0xC0) == 0x80;
        }
        if (!ok) {
            out += kReplacement;
            ++i;
            continue;
        }
        out.append(s, i, len);
        i += len;
    }
    s.erase(0, i);
    return out;
}

}  // namespace

std::string recent_log() {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    std::string out;
    for (const auto & line : g_log_lines) {
        out += "  " + line + "\n";
    }
    return out;
}

void set_log_echo(bool echo) { g_log_echo.store(echo); }

namespace {

// The head's architecture must have an MTP graph in llama.cpp (without one, llama.cpp
// builds the plain decoder graph for the MTP context and fails deep inside graph
// reservation), and single-head MTP graphs assert on files with more heads.
void require_mtp_graph(const Model & head) {
    if (head.has_mtp_graph()) {
        const auto & single = single_head_mtp_architectures();
        const int64_t n_heads = head.info().n_nextn;
        if (n_heads != 1 && std::find(single.begin(), single.end(), head.architecture()) != single.end()) {
            fail(ErrorKind::MissingMtpHead, "'" + head.path() + "' declares " + std::to_string(n_heads) +
                                                " MTP heads, but llama.cpp's " + head.architecture() +
                                                " MTP graph runs exactly one; use n_draft=0 for plain decoding");
        }
        return;
    }
    std::string known;
    for (const auto & a : mtp_graph_architectures()) known += (known.empty() ? "" : ", ") + a;
    fail(ErrorKind::MissingMtpHead, "'" + head.path() + "' has architecture '" + head.architecture() +
                                        "', which stores MTP (nextn) tensors but has no MTP draft graph in this "
                                        "llama.cpp build; use n_draft=0 for plain decoding. Architectures that "
                                        "can draft: " + known);
}

}  // namespace

GgufInfo inspect_gguf(const std::string & path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (path.empty()) {
        fail(ErrorKind::ModelLoad, "model path is empty: pass the path of a .gguf file");
    }
    if (!fs::exists(path, ec)) {
        fail(ErrorKind::ModelLoad, "model file not found: '" + path + "' (check the path)");
    }
    if (fs::is_directory(path, ec)) {
        fail(ErrorKind::ModelLoad, "model path is a directory, not a file: '" + path + "' (pass the .gguf file inside it)");
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        fail(ErrorKind::ModelLoad, "model file is not readable: '" + path + "' (check its permissions)");
    }
    char magic[4] = {0, 0, 0, 0};
    in.read(magic, 4);
    if (in.gcount() < 4 || std::memcmp(magic, "GGUF", 4) != 0) {
        fail(ErrorKind::ModelLoad, "not a GGUF file: '" + path + "' (it does not start with the GGUF magic; "
                                   "convert the model with llama.cpp's convert_hf_to_gguf.py)");
    }
    in.close();

    ensure_backend();
    clear_log();
    ggml_context * meta = nullptr;  // tensor shapes, no data
    gguf_init_params params = {/*no_alloc =*/ true, /*ctx =*/ &meta};
    gguf_context * ctx = gguf_init_from_file(path.c_str(), params);
    if (ctx == nullptr) {
        fail(ErrorKind::ModelLoad, with_log("GGUF file is corrupt or truncated: '" + path + "'"));
    }
    std::unique_ptr<gguf_context, decltype(&gguf_free)> guard(ctx, gguf_free);
    std::unique_ptr<ggml_context, decltype(&ggml_free)> meta_guard(meta, ggml_free);
    return read_gguf_info(ctx, meta, path);
}

std::string json_schema_grammar(const std::string & schema_json) {
    try {
        return json_schema_to_grammar(common_json::parse(schema_json));
    } catch (const std::exception & e) {
        fail(ErrorKind::InvalidOption, std::string("cannot turn the JSON schema into a grammar: ") + e.what());
    }
}

// ----------------------------------------------------------------- Model ---

Model::Model(const std::string & path, const ModelOptions & opts) : path_(path), opts_(opts) {
    info_ = inspect_gguf(path);
    if (opts.n_gpu_layers < -1) {
        fail(ErrorKind::InvalidOption, "n_gpu_layers must be >= -1 (-1 offloads every layer)");
    }
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = opts.n_gpu_layers;
    mp.load_mode = opts.use_mmap ? (opts.use_mlock ? LLAMA_LOAD_MODE_MMAP_MLOCK : LLAMA_LOAD_MODE_MMAP)
                                 : (opts.use_mlock ? LLAMA_LOAD_MODE_MLOCK : LLAMA_LOAD_MODE_NONE);
    mp.load_mtp = opts.load_mtp;
    clear_log();
    llama_model * m = llama_model_load_from_file(path.c_str(), mp);
    if (m == nullptr) {
        fail(ErrorKind::ModelLoad, with_log("llama.cpp could not load '" + path + "' (architecture '" +
                                            info_.architecture + "')"));
    }
    model_.reset(m);
}

std::string Model::description() const {
    char buf[256];
    llama_model_desc(model_.get(), buf, sizeof(buf));
    return buf;
}
int32_t Model::n_vocab() const { return llama_vocab_n_tokens(vocab()); }
int32_t Model::n_embd() const { return llama_model_n_embd(model_.get()); }
int32_t Model::n_ctx_train() const { return llama_model_n_ctx_train(model_.get()); }
int32_t Model::n_layer() const { return llama_model_n_layer(model_.get()); }
int32_t Model::n_mtp_heads() const { return llama_model_n_layer_nextn(model_.get()); }
uint64_t Model::n_params() const { return llama_model_n_params(model_.get()); }
uint64_t Model::size_bytes() const { return llama_model_size(model_.get()); }
int32_t Model::token_bos() const { return llama_vocab_bos(vocab()); }
int32_t Model::token_eos() const { return llama_vocab_eos(vocab()); }
bool Model::is_eog(int32_t token) const { return llama_vocab_is_eog(vocab(), token); }

std::string Model::chat_template() const {
    const char * t = llama_model_chat_template(model_.get(), nullptr);
    return t ? t : "";
}

std::vector<int32_t> Model::tokenize(const std::string & text, bool add_special, bool parse_special) const {
    return common_tokenize(vocab(), text, add_special, parse_special);
}

void Model::check_tokens(const std::vector<int32_t> & tokens) const {
    const int32_t n = n_vocab();
    for (size_t i = 0; i < tokens.size(); ++i) {
        if (tokens[i] < 0 || tokens[i] >= n) {
            fail(ErrorKind::InvalidPrompt, "token id " + std::to_string(tokens[i]) + " at index " +
                                               std::to_string(i) + " is outside the vocabulary [0, " +
                                               std::to_string(n) + ")");
        }
    }
}

std::string Model::detokenize(const std::vector<int32_t> & tokens, bool render_special) const {
    check_tokens(tokens);
    return common_detokenize(vocab(), tokens, render_special);
}

std::string Model::token_piece(int32_t token, bool render_special) const {
    check_tokens({token});
    return common_token_to_piece(vocab(), token, render_special);
}

std::vector<std::vector<float>> Model::embed(const std::vector<std::string> & texts, int32_t n_threads) const {
    std::vector<std::vector<int32_t>> tokenized;
    size_t longest = 1;
    for (const auto & text : texts) {
        tokenized.push_back(tokenize(text, true, false));
        if (tokenized.back().empty()) {
            fail(ErrorKind::InvalidPrompt, "cannot embed an empty text");
        }
        longest = std::max(longest, tokenized.back().size());
    }
    if ((int64_t) longest > n_ctx_train()) {
        fail(ErrorKind::ContextOverflow, "a text to embed has " + std::to_string(longest) +
                                             " tokens, more than the model's context (" + std::to_string(n_ctx_train()) + ")");
    }
    llama_context_params cp = llama_context_default_params();
    cp.embeddings = true;
    cp.pooling_type = LLAMA_POOLING_TYPE_MEAN;
    cp.n_ctx = (uint32_t) longest;
    cp.n_batch = (uint32_t) longest;
    cp.n_ubatch = (uint32_t) longest;
    cp.n_seq_max = 1;
    cp.n_threads = n_threads > 0 ? n_threads : default_threads();
    cp.n_threads_batch = cp.n_threads;
    cp.no_perf = true;
    clear_log();
    llama_context_ptr ctx(llama_init_from_model(model_.get(), cp));
    if (!ctx) {
        fail(ErrorKind::ModelLoad, with_log("llama.cpp could not create an embedding context"));
    }
    std::vector<std::vector<float>> out;
    const int n_embd_out = llama_model_n_embd_out(model_.get());
    for (const auto & tokens : tokenized) {
        llama_memory_clear(llama_get_memory(ctx.get()), true);
        common_batch batch(ctx.get());
        for (size_t i = 0; i < tokens.size(); ++i) {
            batch.add(tokens[i], (llama_pos) i, 0, true);
        }
        const int32_t rc = llama_process(ctx.get(), LLAMA_PROCESS_TYPE_DECODE, batch.get());
        if (rc != 0) {
            fail(ErrorKind::Decode, with_log("llama.cpp failed to compute embeddings (code " + std::to_string(rc) + ")"));
        }
        const float * e = llama_get_embeddings_seq(ctx.get(), 0);
        if (e == nullptr) {
            fail(ErrorKind::Decode, with_log("llama.cpp returned no pooled embedding"));
        }
        std::vector<float> v(e, e + n_embd_out);
        double norm = 0.0;
        for (float x : v) norm += (double) x * x;
        norm = std::sqrt(norm);
        if (norm > 0) {
            for (float & x : v) x = (float) (x / norm);
        }
        out.push_back(std::move(v));
    }
    return out;
}

std::string Model::apply_chat_template(const std::vector<std::pair<std::string, std::string>> & messages,
                                       bool add_generation_prompt, const std::string & chat_template) const {
    if (chat_template.empty() && this->chat_template().empty()) {
        fail(ErrorKind::InvalidOption,
             "this model has no chat template: pass chat_template='...' (a Jinja template)");
    }
    common_chat_templates_ptr tmpls;
    try {
        tmpls = common_chat_templates_init(model_.get(), chat_template);
    } catch (const std::exception & e) {
        fail(ErrorKind::InvalidOption, std::string("chat template does not parse: ") + e.what());
    }
    common_chat_templates_inputs inputs;
    inputs.add_generation_prompt = add_generation_prompt;
    inputs.use_jinja = true;
    for (const auto & [role, content] : messages) {
        common_chat_msg msg;
        msg.role = role;
        msg.content = content;
        inputs.messages.push_back(std::move(msg));
    }
    try {
        return common_chat_templates_apply(tmpls.get(), inputs).prompt;
    } catch (const std::exception & e) {
        fail(ErrorKind::InvalidOption, std::string("chat template failed: ") + e.what());
    }
}

// -------------------------------------------------------------- counters ---

void AtomicCounters::add(const Counters & d) {
    constexpr auto r = std::memory_order_relaxed;
    iters_.fetch_add(d.iters, r);
    replays_.fetch_add(d.replays, r);
    drafts_generated_.fetch_add(d.drafts_generated, r);
    drafts_accepted_.fetch_add(d.drafts_accepted, r);
    tokens_emitted_.fetch_add(d.tokens_emitted, r);
    prompt_tokens_.fetch_add(d.prompt_tokens, r);
    generations_.fetch_add(d.generations, r);
    t_draft_us_.fetch_add(d.t_draft_us, r);
    t_verify_us_.fetch_add(d.t_verify_us, r);
    t_sample_us_.fetch_add(d.t_sample_us, r);
    t_ckpt_us_.fetch_add(d.t_ckpt_us, r);
    t_total_us_.fetch_add(d.t_total_us, r);
    t_prompt_us_.fetch_add(d.t_prompt_us, r);
    for (int i = 0; i < kMaxDraftPositions; ++i) {
        if (d.drafted_at[i]) drafted_at_[i].fetch_add(d.drafted_at[i], r);
        if (d.accepted_at[i]) accepted_at_[i].fetch_add(d.accepted_at[i], r);
    }
}

Counters AtomicCounters::snapshot(int32_t n_draft) const {
    constexpr auto r = std::memory_order_relaxed;
    Counters c;
    c.iters = iters_.load(r);
    c.replays = replays_.load(r);
    c.drafts_generated = drafts_generated_.load(r);
    c.drafts_accepted = drafts_accepted_.load(r);
    c.tokens_emitted = tokens_emitted_.load(r);
    c.prompt_tokens = prompt_tokens_.load(r);
    c.generations = generations_.load(r);
    c.t_draft_us = t_draft_us_.load(r);
    c.t_verify_us = t_verify_us_.load(r);
    c.t_sample_us = t_sample_us_.load(r);
    c.t_ckpt_us = t_ckpt_us_.load(r);
    c.t_total_us = t_total_us_.load(r);
    c.t_prompt_us = t_prompt_us_.load(r);
    c.t_first_token_us = t_first_token_us_.load(r);
    for (int i = 0; i < kMaxDraftPositions; ++i) {
        c.drafted_at[i] = drafted_at_[i].load(r);
        c.accepted_at[i] = accepted_at_[i].load(r);
    }
    c.n_draft = n_draft;
    return c;
}

void AtomicCounters::reset() {
    for (auto * a : {&iters_, &replays_, &drafts_generated_, &drafts_accepted_, &tokens_emitted_,
                     &prompt_tokens_, &generations_, &t_draft_us_, &t_verify_us_, &t_sample_us_,
                     &t_ckpt_us_, &t_total_us_, &t_prompt_us_, &t_first_token_us_}) {
        a->store(0);
    }
    for (int i = 0; i < kMaxDraftPositions; ++i) {
        drafted_at_[i].store(0);
        accepted_at_[i].store(0);
    }
}

// --------------------------------------------------------- TextAssembler ---

void TextAssembler::reset(std::vector<std::string> stop) {
    stop_ = std::move(stop);
    pending_.clear();
}

std::string TextAssembler::push(const std::string & piece, bool & stopped) {
    stopped = false;
    pending_ += piece;
    for (const auto & s : stop_) {
        const size_t pos = pending_.find(s);
        if (pos != std::string::npos) {
            std::string head = pending_.substr(0, pos);
            pending_.clear();
            stopped = true;
            return take_valid_utf8(head, true);
        }
    }
    // Hold back the longest tail that is a proper prefix of a stop string.
    size_t hold = 0;
    for (const auto & s : stop_) {
        const size_t max_len = std::min(s.size() - 1, pending_.size());
        for (size_t len = max_len; len > hold; --len) {
            if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
                hold = len;
                break;
            }
        }
    }
    std::string ready = pending_.substr(0, pending_.size() - hold);
    std::string out = take_valid_utf8(ready, false);
    pending_.erase(0, pending_.size() - hold - ready.size());
    return out;
}

std::string TextAssembler::flush() {
    std::string out = take_valid_utf8(pending_, true);
    pending_.clear();
    return out;
}

// ------------------------------------------------------- reference check ---

ForwardResult forward_with_head(const Model & target, const Model & head, const std::vector<int32_t> & tokens,
                                int32_t n_threads) {
    if (tokens.empty()) {
        fail(ErrorKind::InvalidPrompt, "forward_with_head needs at least one token");
    }
    target.check_tokens(tokens);
    if (!head.has_mtp_head() || !head.options().load_mtp) {
        fail(ErrorKind::MissingMtpHead, "the head model has no loaded MTP head (load it with load_mtp=True)");
    }
    require_mtp_graph(head);
    if (head.n_embd() != target.n_embd() || head.n_vocab() != target.n_vocab()) {
        fail(ErrorKind::IncompatibleDraft, "the head model does not match the target's width or vocabulary");
    }
    const int32_t T = (int32_t) tokens.size();
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) std::max(T, 16);
    cp.n_batch = cp.n_ubatch = (uint32_t) std::max(T, 16);
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = n_threads > 0 ? n_threads : default_threads();
    cp.no_perf = true;
    clear_log();
    llama_context_ptr tgt(llama_init_from_model(target.get(), cp));
    if (!tgt) {
        fail(ErrorKind::ModelLoad, with_log("llama.cpp could not create the target context"));
    }
    llama_context_params dp = cp;
    dp.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
    dp.ctx_other = tgt.get();
    llama_context_ptr dft(llama_init_from_model(head.get(), dp));
    if (!dft) {
        fail(ErrorKind::MissingMtpHead, with_log("llama.cpp could not create the MTP context"));
    }
    llama_set_embeddings_nextn(tgt.get(), true, false);
    llama_set_embeddings_nextn(dft.get(), true, true);

    ForwardResult r;
    r.n_tokens = T;
    r.n_vocab = target.n_vocab();
    r.n_embd = llama_model_n_embd_out(target.get());
    common_batch batch(tgt.get());
    for (int32_t i = 0; i < T; ++i) {
        batch.add(tokens[i], i, 0, true);
    }
    if (llama_process(tgt.get(), LLAMA_PROCESS_TYPE_DECODE, batch.get()) != 0) {
        fail(ErrorKind::Decode, with_log("llama.cpp failed to decode the tokens"));
    }
    for (int32_t i = 0; i < T; ++i) {
        const float * l = llama_get_logits_ith(tgt.get(), i);
        r.trunk_logits.insert(r.trunk_logits.end(), l, l + r.n_vocab);
        const float * h = llama_get_embeddings_nextn_ith(tgt.get(), i);
        r.trunk_hidden.insert(r.trunk_hidden.end(), h, h + r.n_embd);
    }
    // The head pairs token i with the target's hidden state at i-1 (zeros for i = 0),
    // exactly as draft-mtp's process() does.
    const std::vector<float> zeros(r.n_embd, 0.0f);
    common_batch head_batch(dft.get());
    for (int32_t i = 0; i < T; ++i) {
        const int32_t idx = head_batch.add(tokens[i], i, 0, true);
        const float * h = i == 0 ? zeros.data() : r.trunk_hidden.data() + (size_t) (i - 1) * r.n_embd;
        head_batch.set_embd(idx, {h, 1, (size_t) r.n_embd});
    }
    if (llama_process(dft.get(), LLAMA_PROCESS_TYPE_DECODE, head_batch.get()) != 0) {
        fail(ErrorKind::Decode, with_log("llama.cpp failed to run the MTP head"));
    }
    for (int32_t i = 0; i < T; ++i) {
        const float * l = llama_get_logits_ith(dft.get(), i);
        r.head_logits.insert(r.head_logits.end(), l, l + r.n_vocab);
        const float * h = llama_get_embeddings_nextn_ith(dft.get(), i);
        r.head_hidden.insert(r.head_hidden.end(), h, h + r.n_embd);
    }
    return r;
}

// --------------------------------------------------------------- Session ---

namespace {

void validate_context_options(const ContextOptions & o) {
    if (o.n_draft < 0 || o.n_draft > kMaxDraftPositions) {
        fail(ErrorKind::InvalidOption, "n_draft must be between 0 and " + std::to_string(kMaxDraftPositions) +
                                           " (got " + std::to_string(o.n_draft) + "); 2-4 is typical");
    }
    if (o.n_ctx < 16) {
        fail(ErrorKind::InvalidOption, "n_ctx must be at least 16 (got " + std::to_string(o.n_ctx) + ")");
    }
    if (o.n_batch < 1) {
        fail(ErrorKind::InvalidOption, "n_batch must be at least 1 (got " + std::to_string(o.n_batch) + ")");
    }
    if (o.n_batch <= o.n_draft) {
        fail(ErrorKind::InvalidOption, "n_batch must be greater than n_draft (the verify batch holds n_draft + 1 tokens)");
    }
    if (o.n_threads < 0 || o.n_threads_batch < 0) {
        fail(ErrorKind::InvalidOption, "n_threads and n_threads_batch must be >= 0 (0 = all cores)");
    }
    if (o.flash_attn < -1 || o.flash_attn > 1) {
        fail(ErrorKind::InvalidOption, "flash_attn must be -1 (auto), 0 (off) or 1 (on)");
    }
    for (int32_t t : {o.type_k, o.type_v}) {
        if (t < -1 || t >= GGML_TYPE_COUNT || (t >= 0 && ggml_get_type_traits((ggml_type) t)->blck_size == 0)) {
            fail(ErrorKind::InvalidOption, "type_k/type_v is not a valid ggml type id (got " + std::to_string(t) + ")");
        }
    }
}

}  // namespace

Session::Session(std::shared_ptr<Model> target, std::shared_ptr<Model> draft, const ContextOptions & opts)
    : target_(std::move(target)), draft_model_(std::move(draft)), opts_(opts) {
    validate_context_options(opts_);
    const bool use_mtp = opts_.n_draft > 0;
    Model * head_model = nullptr;

    if (target_->is_mtp_sidecar()) {
        fail(ErrorKind::ModelLoad, "'" + target_->path() + "' is an MTP sidecar (head only, no trunk): "
                                   "load the trunk model as the target and pass this file as draft_model");
    }
    if (use_mtp) {
        if (draft_model_) {
            if (!draft_model_->options().load_mtp) {
                fail(ErrorKind::MissingMtpHead, "draft_model was loaded with load_mtp=False: "
                                                "load it with Model.load(path, load_mtp=True)");
            }
            if (!draft_model_->has_mtp_head()) {
                fail(ErrorKind::MissingMtpHead, "draft_model '" + draft_model_->path() + "' has no MTP head tensors "
                                                "(pass an mtp-*.gguf sidecar or a model with an embedded head)");
            }
            require_mtp_graph(*draft_model_);
            if (draft_model_->n_embd() != target_->n_embd()) {
                fail(ErrorKind::IncompatibleDraft,
                     "draft_model hidden size " + std::to_string(draft_model_->n_embd()) + " does not match the target's " +
                     std::to_string(target_->n_embd()) + ": use the sidecar made for this target");
            }
            if (draft_model_->n_vocab() != target_->n_vocab()) {
                fail(ErrorKind::IncompatibleDraft,
                     "draft_model vocabulary size " + std::to_string(draft_model_->n_vocab()) + " does not match the target's " +
                     std::to_string(target_->n_vocab()) + ": use the sidecar made for this target");
            }
            if (draft_model_->architecture() != target_->architecture()) {
                fail(ErrorKind::IncompatibleDraft, "draft_model architecture '" + draft_model_->architecture() +
                                                       "' does not match the target's '" + target_->architecture() + "'");
            }
            head_model = draft_model_.get();
        } else {
            if (target_->info().n_nextn == 0) {
                fail(ErrorKind::MissingMtpHead,
                     "'" + target_->path() + "' has no MTP head: pass draft_model=Model.load('mtp-....gguf') "
                     "with its sidecar head, or n_draft=0 for plain decoding");
            }
            require_mtp_graph(*target_);
            if (!target_->info().has_mtp_tensors) {
                fail(ErrorKind::MissingMtpHead,
                     "'" + target_->path() + "' is a trunk-only model (its MTP head is stored in a separate "
                     "mtp-*.gguf file): pass draft_model=Model.load('mtp-....gguf')");
            }
            if (!target_->options().load_mtp) {
                fail(ErrorKind::MissingMtpHead, "the target was loaded with load_mtp=False, so its MTP head is "
                                                "not in memory: load it with Model.load(path, load_mtp=True) "
                                                "or use n_draft=0");
            }
            head_model = target_.get();
        }
    }

    ensure_backend();
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) opts_.n_ctx;
    cp.n_batch = (uint32_t) opts_.n_batch;
    cp.n_ubatch = (uint32_t) opts_.n_batch;
    cp.n_seq_max = 1;
    cp.n_threads = opts_.n_threads > 0 ? opts_.n_threads : default_threads();
    cp.n_threads_batch = opts_.n_threads_batch > 0 ? opts_.n_threads_batch : cp.n_threads;
    flash_attn_type_ = resolve_flash_attn(opts_);
    cp.flash_attn_type = flash_attn_type_;
    if (opts_.type_k >= 0) cp.type_k = (ggml_type) opts_.type_k;
    if (opts_.type_v >= 0) cp.type_v = (ggml_type) opts_.type_v;
    cp.offload_kqv = opts_.offload_kqv;
    cp.no_perf = true;
    cp.abort_callback = &Session::abort_cb;
    cp.abort_callback_data = this;
    cp.n_outputs_max = 0;
    cp.n_rs_seq = use_mtp && opts_.use_rs_rollback ? (uint32_t) opts_.n_draft : 0;

    clear_log();
    ctx_tgt_.reset(llama_init_from_model(target_->get(), cp));
    if (!ctx_tgt_) {
        fail(ErrorKind::ModelLoad, with_log("llama.cpp could not create the target context (n_ctx=" +
                                            std::to_string(opts_.n_ctx) + ")"));
    }
    if ((int32_t) llama_n_batch(ctx_tgt_.get()) < opts_.n_draft + 1) {
        fail(ErrorKind::InvalidOption, "the verify batch needs n_draft + 1 = " + std::to_string(opts_.n_draft + 1) +
                                           " tokens but the context allows " +
                                           std::to_string(llama_n_batch(ctx_tgt_.get())) + ": raise n_ctx or n_batch");
    }
    seq_rm_tgt_ = common_context_can_seq_rm(ctx_tgt_.get());
    batch_ = common_batch(ctx_tgt_.get());
    accepted_batch_ = common_batch(ctx_tgt_.get());

    if (use_mtp) {
        llama_context_params dp = cp;
        dp.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
        dp.ctx_other = ctx_tgt_.get();
        dp.n_rs_seq = 0;
        clear_log();
        ctx_dft_.reset(llama_init_from_model(head_model->get(), dp));
        if (!ctx_dft_) {
            fail(ErrorKind::MissingMtpHead, with_log("llama.cpp could not create the MTP draft context for '" +
                                                     head_model->path() + "'"));
        }
        seq_rm_dft_ = common_context_can_seq_rm(ctx_dft_.get());

        spec_params_.types = {COMMON_SPECULATIVE_TYPE_DRAFT_MTP};
        spec_params_.draft.n_max = opts_.n_draft;
        spec_params_.draft.n_min = 0;
        spec_params_.draft.p_min = 0.0f;
        spec_params_.draft.ctx_tgt = ctx_tgt_.get();
        spec_params_.draft.ctx_dft = ctx_dft_.get();
        spec_.reset(common_speculative_init(spec_params_, 1));
        if (!spec_) {
            fail(ErrorKind::MissingMtpHead, with_log("llama.cpp could not initialise draft-mtp speculation"));
        }
    }
}

Session::~Session() = default;

int32_t Session::n_ctx() const { return (int32_t) llama_n_ctx(ctx_tgt_.get()); }

std::string Session::flash_attn() const {
    switch (flash_attn_type_) {
        case LLAMA_FLASH_ATTN_TYPE_ENABLED: return "on";
        case LLAMA_FLASH_ATTN_TYPE_DISABLED: return "off";
        default: return "auto";
    }
}

std::string Session::rollback_mode() const {
    if (!spec_) {
        return "none";  // plain decoding never rolls back
    }
    switch (seq_rm_tgt_) {
        case COMMON_CONTEXT_SEQ_RM_TYPE_NO: return "none";
        case COMMON_CONTEXT_SEQ_RM_TYPE_PART: return "partial";
        case COMMON_CONTEXT_SEQ_RM_TYPE_FULL: return "checkpoint";
        case COMMON_CONTEXT_SEQ_RM_TYPE_RS: return "rs";
    }
    return "unknown";
}

bool Session::abort_cb(void * data) {
    auto * self = static_cast<Session *>(data);
    if (self->cancel_requested_.load(std::memory_order_relaxed)) {
        return true;
    }
    const int64_t deadline = self->deadline_us_.load(std::memory_order_relaxed);
    return deadline > 0 && now_us() > deadline;
}

void Session::check_deadline() {
    if (cancel_requested_.load()) {
        fail(ErrorKind::Cancelled, "generation was cancelled");
    }
    const int64_t deadline = deadline_us_.load();
    if (deadline > 0 && now_us() > deadline) {
        fail(ErrorKind::Timeout, "generation exceeded its timeout");
    }
}

void Session::decode_or_throw(llama_context * ctx, common_batch & batch, const char * what) {
    const int32_t rc = llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, batch.get());
    if (rc == 2) {
        check_deadline();
        fail(ErrorKind::Cancelled, "generation was aborted");
    }
    if (rc != 0) {
        fail(ErrorKind::Decode, with_log(std::string("llama.cpp failed to decode the ") + what +
                                         " (code " + std::to_string(rc) + ")"));
    }
}

namespace {

void validate_generate_options(const GenerateOptions & g, int32_t session_n_draft) {
    const auto & s = g.sampling;
    if (g.max_tokens < 1) {
        fail(ErrorKind::InvalidOption, "max_tokens must be at least 1 (got " + std::to_string(g.max_tokens) + ")");
    }
    if (g.n_draft < -1 || g.n_draft > session_n_draft) {
        fail(ErrorKind::InvalidOption, "per-call n_draft must be between 0 and the session's n_draft (" +
                                           std::to_string(session_n_draft) + "), got " + std::to_string(g.n_draft));
    }
    if (!(g.timeout_s >= 0.0) || std::isinf(g.timeout_s)) {
        fail(ErrorKind::InvalidOption, "timeout must be a positive number of seconds or None");
    }
    if (!std::isfinite(s.temp) || s.temp < 0.0f) {
        fail(ErrorKind::InvalidOption, "temp must be a finite number >= 0 (0 = greedy)");
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

}  // namespace

void Session::begin(const std::vector<int32_t> & prompt, const GenerateOptions & g) {
    if (active_.exchange(true)) {
        fail(ErrorKind::Busy, "a generation is already running on this session: finish or close it first, "
                              "or use one session per concurrent generation");
    }
    try {
        validate_generate_options(g, opts_.n_draft);
        if (prompt.empty()) {
            fail(ErrorKind::InvalidPrompt, "prompt is empty: pass at least one token or a non-empty string");
        }
        target_->check_tokens(prompt);
        const int64_t need = (int64_t) prompt.size() + g.max_tokens;
        if (need > n_ctx()) {
            fail(ErrorKind::ContextOverflow,
                 "prompt (" + std::to_string(prompt.size()) + " tokens) plus max_tokens (" +
                     std::to_string(g.max_tokens) + ") exceeds n_ctx (" + std::to_string(n_ctx()) +
                     "): shorten the prompt, lower max_tokens or create the session with a larger n_ctx");
        }

        common_params_sampling sp;
        sp.temp = g.sampling.temp;
        sp.top_k = g.sampling.top_k;
        sp.top_p = g.sampling.top_p;
        sp.min_p = g.sampling.min_p;
        sp.seed = g.sampling.seed;
        sp.penalty_repeat = g.sampling.repeat_penalty;
        sp.penalty_freq = g.sampling.frequency_penalty;
        sp.penalty_present = g.sampling.presence_penalty;
        sp.penalty_last_n = g.sampling.penalty_last_n;
        sp.no_perf = true;
        if (!g.sampling.grammar.empty()) {
            sp.grammar = common_grammar(COMMON_GRAMMAR_TYPE_USER, g.sampling.grammar);
        }
        clear_log();
        try {
            sampler_.reset(common_sampler_init(target_->get(), sp));
        } catch (const std::exception & e) {
            fail(g.sampling.grammar.empty() ? ErrorKind::InvalidOption : ErrorKind::Grammar,
                 with_log(std::string("invalid sampling options: ") + e.what()));
        }
        if (!sampler_) {
            fail(ErrorKind::Grammar, with_log("the grammar does not parse (GBNF syntax error)"));
        }

        cancel_requested_.store(false);
        // Timeouts beyond ~30 years are treated as none (and cannot overflow).
        deadline_us_.store(g.timeout_s > 0.0 && g.timeout_s < 1e9 ? now_us() + (int64_t) (g.timeout_s * 1e6) : 0);
        active_n_draft_ = spec_ ? (g.n_draft < 0 ? opts_.n_draft : g.n_draft) : 0;
        max_tokens_ = g.max_tokens;
        produced_ = 0;
        text_.reset(g.stop);
        draft_tokens_.clear();
        ckpt_.clear();
        replay_pending_ = false;
        finished_ = false;
        first_token_seen_ = false;

        llama_memory_clear(llama_get_memory(ctx_tgt_.get()), true);
        if (ctx_dft_) {
            llama_memory_clear(llama_get_memory(ctx_dft_.get()), true);
        }
        prompt_.assign(prompt.begin(), prompt.end() - 1);
        prompt_done_ = 0;
        id_last_ = prompt.back();
        context_tokens_.clear();
        context_tokens_.reserve(n_ctx());
        n_past_ = 0;
        prompt_phase_ = true;
        call_.reset();
        Counters c;
        c.prompt_tokens = prompt.size();
        c.generations = 1;
        call_.add(c);
        total_.add(c);
        t_begin_us_ = now_us();
    } catch (...) {
        sampler_.reset();
        active_.store(false);
        throw;
    }
}

void Session::end() {
    sampler_.reset();
    deadline_us_.store(0);
    cancel_requested_.store(false);
    active_.store(false);
}

void Session::process_prompt_chunk() {
    const int64_t t0 = now_us();
    const size_t n = std::min(prompt_.size() - prompt_done_, (size_t) llama_n_batch(ctx_tgt_.get()));
    if (n > 0) {
        common_batch & batch = batch_;
        batch.clear();
        for (size_t i = 0; i < n; ++i) {
            batch.add(prompt_[prompt_done_ + i], (llama_pos) (prompt_done_ + i), 0, false);
        }
        decode_or_throw(ctx_tgt_.get(), batch, "prompt");
        if (drafting() && !common_speculative_process(spec_.get(), batch)) {
            check_deadline();
            fail(ErrorKind::Decode, with_log("the MTP head failed to process the prompt"));
        }
        for (size_t i = 0; i < n; ++i) {
            common_sampler_accept(sampler_.get(), prompt_[prompt_done_ + i], false);
        }
        prompt_done_ += n;
    }
    if (prompt_done_ == prompt_.size()) {
        context_tokens_.assign(prompt_.begin(), prompt_.end());
        n_past_ = (int32_t) prompt_.size();
        if (drafting()) {
            common_speculative_begin(spec_.get(), 0, context_tokens_);
        }
        prompt_phase_ = false;
    }
    Counters c;
    c.t_prompt_us = now_us() - t0;
    call_.add(c);
    total_.add(c);
}

StepResult Session::step() {
    StepResult out;
    if (!active_.load()) {
        fail(ErrorKind::Busy, "no generation is running: call begin() first");
    }
    if (finished_) {
        out.finished = true;
        return out;
    }
    check_deadline();
    if (prompt_phase_) {
        process_prompt_chunk();
        return out;
    }
    speculative_iteration(out);
    return out;
}

void Session::speculative_iteration(StepResult & out) {
    Counters c;
    const int64_t t_start = now_us();
    llama_context * ctx_tgt = ctx_tgt_.get();
    llama_context * ctx_dft = ctx_dft_.get();
    const bool use_ckpt_tgt = seq_rm_tgt_ == COMMON_CONTEXT_SEQ_RM_TYPE_FULL;
    const bool use_ckpt_dft = ctx_dft && seq_rm_dft_ == COMMON_CONTEXT_SEQ_RM_TYPE_FULL;
    const bool is_replay = replay_pending_;

    if (!is_replay) {
        draft_tokens_.clear();
        if (drafting()) {
            const int64_t t0 = now_us();
            ckpt_.update_pos((int64_t) context_tokens_.size(),
                             llama_memory_seq_pos_min(llama_get_memory(ctx_tgt), 0),
                             llama_memory_seq_pos_max(llama_get_memory(ctx_tgt), 0));
            if (use_ckpt_dft) {
                ckpt_.update_dft(ctx_dft, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
            }
            const int64_t t1 = now_us();
            int n_draft_max = n_ctx() - n_past_ - 2;
            n_draft_max = std::min(n_draft_max, max_tokens_ - produced_ - 1);
            n_draft_max = std::min(n_draft_max, active_n_draft_);
            n_draft_max = std::max(n_draft_max, 0);
            if (n_draft_max > 0) {
                common_speculative_draft_params & dp = common_speculative_get_draft_params(spec_.get(), 0);
                dp.drafting = true;
                dp.n_max = n_draft_max;
                dp.pos0 = n_past_;
                dp.id_last = id_last_;
                dp.prompt = &context_tokens_;
                dp.result = &draft_tokens_;
                common_speculative_draft(spec_.get());
                if ((int) draft_tokens_.size() > n_draft_max) {
                    draft_tokens_.resize(n_draft_max);
                }
            }
            const int64_t t2 = now_us();
            if (!draft_tokens_.empty() && use_ckpt_tgt) {
                ckpt_.update_tgt(ctx_tgt, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
            }
            if (use_ckpt_dft) {
                ckpt_.load_dft(ctx_dft, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
            }
            llama_memory_seq_rm(llama_get_memory(ctx_dft), 0, ckpt_.pos_max + 1, -1);
            const int64_t t3 = now_us();
            if (use_ckpt_tgt || use_ckpt_dft) {
                c.t_draft_us += t2 - t1;
                c.t_ckpt_us += (t1 - t0) + (t3 - t2);
            } else {
                c.t_draft_us += t3 - t0;
            }
        }
    }
    replay_pending_ = false;

    // Verify [id_last, draft...] on the target.
    const int64_t tv0 = now_us();
    common_batch & batch = batch_;
    batch.clear();
    batch.add(id_last_, n_past_, 0, true);
    for (size_t i = 0; i < draft_tokens_.size(); ++i) {
        batch.add(draft_tokens_[i], n_past_ + 1 + (llama_pos) i, 0, true);
    }
    decode_or_throw(ctx_tgt, batch, "verify batch");
    const int64_t tv1 = now_us();
    c.t_verify_us += tv1 - tv0;

    common_sampler_ptr sampler_save;
    if (use_ckpt_tgt && !draft_tokens_.empty()) {
        sampler_save.reset(common_sampler_clone(sampler_.get()));
    }
    const size_t n_draft = draft_tokens_.size();
    std::vector<llama_token> ids = common_sampler_sample_and_accept_n(sampler_.get(), ctx_tgt, draft_tokens_);
    const int64_t ts = now_us();
    c.t_sample_us += ts - tv1;
    c.iters = 1;

    const size_t n_accepted = ids.size() - 1;
    const bool restoring_checkpoint = use_ckpt_tgt && n_accepted < n_draft;
    if (drafting() && !restoring_checkpoint) {
        // The head catches up on [id_last, accepted drafts] only: rows past the
        // first rejection would be trimmed from its cache right after.
        const common_batch * catch_up = &batch;
        if (n_accepted < n_draft) {
            accepted_batch_.clear();
            for (size_t i = 0; i <= n_accepted; ++i) {
                accepted_batch_.add(batch.tokens[i].id, batch.tokens[i].pos[0], 0, true);
            }
            catch_up = &accepted_batch_;
        }
        if (!common_speculative_process(spec_.get(), *catch_up)) {
            check_deadline();
            fail(ErrorKind::Decode, with_log("the MTP head failed to process the verify batch"));
        }
        c.t_draft_us += now_us() - ts;
    }
    if (is_replay) {
        c.replays = 1;
    } else {
        c.drafts_generated = n_draft;
        c.drafts_accepted = n_accepted;
        for (size_t i = 0; i < n_draft && i < (size_t) kMaxDraftPositions; ++i) {
            c.drafted_at[i] = 1;
            c.accepted_at[i] = i < n_accepted ? 1 : 0;
        }
    }

    if (restoring_checkpoint) {
        // Partial acceptance without partial rollback: restore the checkpoint
        // and re-verify the accepted tokens next step (a replay, not new drafts).
        const int64_t tc0 = now_us();
        draft_tokens_ = std::move(ids);
        ckpt_.load_tgt(ctx_tgt, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
        llama_memory_seq_rm(llama_get_memory(ctx_tgt), 0, ckpt_.pos_max + 1, -1);
        if (ctx_dft) {
            ckpt_.load_dft(ctx_dft, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
            llama_memory_seq_rm(llama_get_memory(ctx_dft), 0, ckpt_.pos_max + 1, -1);
        }
        context_tokens_.resize(ckpt_.n_tokens);
        sampler_ = std::move(sampler_save);
        n_past_ = (int32_t) context_tokens_.size();
        replay_pending_ = true;
        c.t_ckpt_us += now_us() - tc0;
        c.t_total_us = now_us() - t_start;
        call_.add(c);
        total_.add(c);
        return;
    }

    if (drafting()) {
        common_speculative_accept(spec_.get(), 0, (uint16_t) n_accepted);
    }
    n_past_ += (int32_t) ids.size();
    draft_tokens_.clear();
    llama_memory_seq_rm(llama_get_memory(ctx_tgt), 0, n_past_, -1);
    if (ctx_dft) {
        llama_memory_seq_rm(llama_get_memory(ctx_dft), 0, n_past_, -1);
    }

    const size_t before = out.tokens.size();
    commit_tokens(ids, out);
    c.tokens_emitted = out.tokens.size() - before;
    if (!first_token_seen_ && !out.tokens.empty()) {
        first_token_seen_ = true;
        const uint64_t ttft = (uint64_t) (now_us() - t_begin_us_);
        call_.set_first_token(ttft);
        total_.set_first_token(ttft);
    }
    c.t_total_us = now_us() - t_start;
    call_.add(c);
    total_.add(c);
}

void Session::commit_tokens(const std::vector<llama_token> & ids, StepResult & out) {
    for (llama_token id : ids) {
        context_tokens_.push_back(id_last_);
        id_last_ = id;
        if (target_->is_eog(id)) {
            out.tokens.push_back({id, ""});
            finish(out, "eog");
            return;
        }
        bool stopped = false;
        std::string text = text_.push(common_token_to_piece(ctx_tgt_.get(), id, false), stopped);
        out.tokens.push_back({id, std::move(text)});
        ++produced_;
        if (stopped) {
            finish(out, "stop");
            return;
        }
        if (produced_ >= max_tokens_) {
            finish(out, "length");
            return;
        }
    }
}

void Session::finish(StepResult & out, const std::string & reason) {
    if (reason != "stop") {
        std::string rest = text_.flush();
        if (!rest.empty() && !out.tokens.empty()) {
            out.tokens.back().text += rest;
        }
    }
    finished_ = true;
    out.finished = true;
    out.finish_reason = reason;
}

void Session::print_stats() const {
    if (!spec_) {
        return;
    }
    const int thold = common_log_get_verbosity_thold();
    common_log_set_verbosity_thold(LOG_LEVEL_TRACE);
    common_speculative_print_stats(spec_.get());
    common_log_flush(common_log_main());
    common_log_set_verbosity_thold(thold);
    std::fflush(stdout);
    std::fflush(stderr);
}

}  // namespace mtp
