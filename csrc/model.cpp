#include "model.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "chat.h"
#include "chat.hpp"  // check_chat_template
#include "common.h"
#include "errors.hpp"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml-rpc.h"
#include "gguf.h"
#include "llama-model.h"  // tensors_by_name: where each weight was placed
#include "rpc.hpp"
#include "runtime.hpp"

namespace mtp {

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

static void add_split_parts(GgufInfo & info, const gguf_context * first, const std::string & path);

namespace {

// A GGUF file's header (metadata and tensor shapes, no data), owned.
struct GgufHeader {
    std::unique_ptr<gguf_context, decltype(&gguf_free)> gguf{nullptr, gguf_free};
    std::unique_ptr<ggml_context, decltype(&ggml_free)> meta{nullptr, ggml_free};
};

GgufHeader open_header(const std::string & path) {
    ggml_context * meta = nullptr;
    gguf_init_params params = {/*no_alloc =*/ true, /*ctx =*/ &meta};
    gguf_context * ctx = gguf_init_from_file(path.c_str(), params);
    if (ctx == nullptr) {
        fail(ErrorKind::ModelLoad, with_log("GGUF file is corrupt or truncated: '" + path +
                                            "' (an incomplete download or copy: download or copy it again)"));
    }
    GgufHeader h;
    h.gguf.reset(ctx);
    h.meta.reset(meta);
    return h;
}

}  // namespace

GgufInfo inspect_gguf(const std::string & path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (path.empty()) {
        fail(ErrorKind::ModelLoad, "model path is empty: pass the path of a .gguf file");
    }
    if (path.find('\0') != std::string::npos) {
        fail(ErrorKind::ModelLoad, "model path contains a NUL character: '" + path.substr(0, path.find('\0')) + "\\0...'");
    }
    const fs::file_status status = fs::status(path, ec);
    if (ec == std::errc::too_many_symbolic_link_levels) {
        fail(ErrorKind::ModelLoad, "model path '" + path + "' is a symlink loop (a link that leads back to itself)");
    }
    if (!fs::exists(status)) {
        fail(ErrorKind::ModelLoad, "model file not found: '" + path + "' (check the path)");
    }
    if (fs::is_directory(status)) {
        fail(ErrorKind::ModelLoad, "model path is a directory, not a file: '" + path + "' (pass the .gguf file inside it)");
    }
    if (!fs::is_regular_file(status)) {
        // Reading a named pipe blocks until a writer comes; a device may never end.
        fail(ErrorKind::ModelLoad, "model path '" + path + "' is not a regular file (a named pipe, device or "
                                   "socket): pass the .gguf file itself");
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
    const GgufHeader header = open_header(path);
    GgufInfo info = read_gguf_info(header.gguf.get(), header.meta.get(), path);
    add_split_parts(info, header.gguf.get(), path);
    return info;
}

// A split GGUF is loaded from its first file; llama.cpp finds the others by name
// (<prefix>-0000k-of-0000N.gguf) beside it. Check they are there and read their tensors.
static void add_split_parts(GgufInfo & info, const gguf_context * first, const std::string & path) {
    const int64_t n_split = split_count(first);
    if (n_split <= 1) {
        return;
    }
    std::vector<char> buf(path.size() + 64, 0);
    const int64_t index = split_index(first);
    if (index != 0 || llama_split_prefix(buf.data(), buf.size(), path.c_str(), 0, (int) n_split) == 0) {
        fail(ErrorKind::ModelLoad, "'" + path + "' is part " + std::to_string(index + 1) + " of a GGUF split in " +
                                       std::to_string(n_split) + " files: load the first one, named <name>-00001-of-" +
                                       std::to_string(100000 + n_split).substr(1) + ".gguf");
    }
    const std::string prefix(buf.data());
    for (int k = 1; k < (int) n_split; ++k) {
        llama_split_path(buf.data(), buf.size(), prefix.c_str(), k, (int) n_split);
        const std::string part(buf.data());
        std::error_code ec;
        if (!std::filesystem::is_regular_file(part, ec)) {
            fail(ErrorKind::ModelLoad, "part " + std::to_string(k + 1) + " of " + std::to_string(n_split) +
                                           " of the split GGUF '" + path + "' is missing: '" + part +
                                           "' (every part must be in the same folder)");
        }
        const GgufHeader header = open_header(part);
        read_split_part(info, header.gguf.get(), header.meta.get(), part);
    }
}

namespace {

// When a model load over RPC last made progress (a tensor loaded), for RpcStopScope.
struct LoadProgress {
    std::atomic<int64_t> last_us;
    int64_t timeout_us;
    static bool stalled(void * data) {
        const auto * p = static_cast<const LoadProgress *>(data);
        return now_us() - p->last_us.load() > p->timeout_us;
    }
};

}  // namespace

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

    // RPC: the servers' devices (checked first: ggml aborts on a failed connection), then the
    // local accelerators, which llama.cpp would otherwise pick from the registry.
    std::vector<ggml_backend_dev_t> devices;
    std::vector<float> split;
    const bool remote = !opts.rpc_servers.empty() && !(opts.mtp_local && is_mtp_sidecar());
    if (!opts.rpc_servers.empty()) {
        if (opts.rpc_servers.size() > GGML_RPC_MAX_SERVERS) {
            fail(ErrorKind::InvalidOption, "at most " + std::to_string(GGML_RPC_MAX_SERVERS) + " RPC servers");
        }
        if (!(opts.rpc_timeout > 0)) {
            fail(ErrorKind::InvalidOption, "rpc_timeout must be > 0 seconds");
        }
        for (const auto & endpoint : opts.rpc_servers) {
            check_endpoint(endpoint);
        }
    }
    // rpc_timeout bounds the load too: once nothing has loaded for that long, a server that then
    // answers nothing for as long is given up on (its connection is marked lost, the load fails).
    LoadProgress progress{now_us(), (int64_t) (opts.rpc_timeout * 1e6)};
    RpcStopScope stop_scope(remote, &LoadProgress::stalled, &progress, opts.rpc_timeout);
    if (remote) {
        for (const auto & endpoint : opts.rpc_servers) {
            for (ggml_backend_dev_t dev : rpc_devices(endpoint, opts.rpc_timeout)) {
                devices.push_back(dev);
            }
        }
        for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
            ggml_backend_dev_t dev = ggml_backend_dev_get(i);
            const auto type = ggml_backend_dev_type(dev);
            if (type == GGML_BACKEND_DEVICE_TYPE_GPU || type == GGML_BACKEND_DEVICE_TYPE_IGPU) {
                devices.push_back(dev);
            }
        }
        devices.push_back(nullptr);
        mp.devices = devices.data();
    }

    // The head's blocks (blk.<n_layer + i>) go where they are put through buffer-type
    // overrides (the patterns must outlive the load): mtp_device when given, else this
    // process's memory when the trunk is spread over RPC servers (mtp_local).
    ggml_backend_buffer_type_t head_buft = nullptr;
    if (!opts.mtp_device.empty()) {
        ggml_backend_dev_t dev = placement_device(opts.mtp_device);
        if (info_.n_nextn <= 0) {
            fail(ErrorKind::InvalidOption, "mtp_device='" + opts.mtp_device + "' but '" + path +
                                               "' has no MTP head to place (it declares no nextn layers)");
        }
        head_buft = ggml_backend_dev_buffer_type(dev);
    } else if (remote && opts.mtp_local && info_.n_nextn > 0 && info_.block_count > info_.n_nextn) {
        head_buft = ggml_backend_cpu_buffer_type();
    }
    std::vector<std::string> patterns;
    std::vector<llama_model_tensor_buft_override> overrides;
    if (head_buft != nullptr) {
        for (int64_t il = head_first_block(); il < info_.block_count; ++il) {
            patterns.push_back("^blk\\." + std::to_string(il) + "\\.");
        }
        for (const auto & p : patterns) {
            overrides.push_back({p.c_str(), head_buft});
        }
        overrides.push_back({nullptr, nullptr});
        mp.tensor_buft_overrides = overrides.data();
    }

    if (!opts.tensor_split.empty()) {
        const size_t n_dev = remote ? devices.size() - 1 : 0;
        if (opts.tensor_split.size() > std::max<size_t>(n_dev, 1) || opts.tensor_split.size() > llama_max_devices()) {
            fail(ErrorKind::InvalidOption, "tensor_split has " + std::to_string(opts.tensor_split.size()) +
                                               " entries for " + std::to_string(n_dev) + " devices (each RPC "
                                               "server's devices, then local accelerators)");
        }
        float sum = 0;
        for (float f : opts.tensor_split) {
            if (!(f >= 0)) fail(ErrorKind::InvalidOption, "tensor_split entries must be >= 0");
            sum += f;
        }
        if (!(sum > 0)) fail(ErrorKind::InvalidOption, "tensor_split must have a positive entry");
        split.assign(llama_max_devices(), 0.0f);
        std::copy(opts.tensor_split.begin(), opts.tensor_split.end(), split.begin());
        mp.tensor_split = split.data();
    }
    clear_log();
    if (remote) {
        mp.progress_callback = [](float, void * data) {
            static_cast<LoadProgress *>(data)->last_us.store(now_us());
            return true;
        };
        mp.progress_callback_user_data = &progress;
    }
    llama_model * m = llama_model_load_from_file(path.c_str(), mp);
    if (m == nullptr) {
        fail(ErrorKind::ModelLoad, with_log("llama.cpp could not load '" + path + "' (architecture '" +
                                            info_.architecture + "')"));
    }
    model_.reset(m);
    // llama_model::create_memory asserts this when a context is made: a sliding-window
    // architecture whose sliding_window_pattern marks no layer (found by fuzzing GGUF metadata).
    const llama_hparams & hp = model_->hparams;
    if (hp.swa_type != LLAMA_SWA_TYPE_NONE && hp.n_layer_all > 0 && !hp.is_swa_any()) {
        fail(ErrorKind::ModelLoad, "GGUF file is corrupt or unsupported: " + info_.architecture +
                                       ".attention.sliding_window_pattern marks no layer as sliding-window, but the "
                                       "architecture uses sliding-window attention: '" + path + "'");
    }
    if (!remote) {
        opts_.rpc_servers.clear();  // a sidecar head kept local uses no server
    }
    for (const auto & endpoint : opts_.rpc_servers) {
        // A server given no tensor (all layers elsewhere) keeps no connection open.
        const int state = rpc_connection_state(endpoint);
        if (state == 0) {
            fail(ErrorKind::ModelLoad, with_log("the connection to RPC server " + endpoint + " was lost while loading '" + path + "'"));
        }
        if (state == 1) {
            rpc_held_.push_back(endpoint);
        }
    }
    for (ggml_backend_dev_t dev : devices) {
        if (dev != nullptr) device_names_.push_back(std::string(ggml_backend_dev_name(dev)) + " (" +
                                                    ggml_backend_dev_description(dev) + ")");
    }
}

void Model::check_rpc() const {
    for (const auto & endpoint : rpc_held_) {
        if (rpc_lost_.load() || !rpc_connection_alive(endpoint)) {
            rpc_lost_.store(true);
            fail(ErrorKind::RpcLost, "the connection to RPC server " + endpoint + " was lost: the model's "
                                     "layers on it are gone; restart the server and load the model again");
        }
    }
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

std::vector<std::string> Model::weight_devices(int32_t first, int32_t last, bool output) const {
    std::vector<std::string> out;
    for (const auto & [name, tensor] : model_->tensors_by_name) {
        if (tensor == nullptr || tensor->buffer == nullptr) {
            continue;
        }
        bool wanted = output && (name.rfind("output.", 0) == 0 || name.rfind("output_norm.", 0) == 0);
        if (!wanted && name.rfind("blk.", 0) == 0) {
            const int32_t il = std::atoi(name.c_str() + 4);
            wanted = il >= first && il < last;
        }
        if (wanted) {
            out.push_back(buffer_device_name(ggml_backend_buffer_get_type(tensor->buffer)));
        }
    }
    sort_device_names(out);
    return out;
}
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
    cp.n_threads = n_threads > 0 ? std::min(n_threads, default_threads()) : default_threads();
    cp.n_threads_batch = cp.n_threads;
    cp.no_perf = true;
    clear_log();
    llama_context_ptr ctx(llama_init_from_model(model_.get(), cp));
    if (!ctx) {
        fail(ErrorKind::ModelLoad, with_log("llama.cpp could not create an embedding context"));
    }
    ComputeThreads threads(cp.n_threads, cp.n_threads_batch);  // ends before the context
    threads.attach(ctx.get());
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
    check_chat_template(chat_template.empty() ? this->chat_template() : chat_template, "the chat template");
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

}  // namespace mtp
