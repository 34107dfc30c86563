// Thin pybind11 layer over the engine: argument conversion, GIL release,
// error translation. No logic lives here.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>

#include "cost_probe.hpp"
#include "errors.hpp"
#include "gil.hpp"
#include "model.hpp"
#include "options.hpp"
#include "parity.hpp"
#include "scoring.hpp"
#include "rpc.hpp"
#include "cpu_backend.hpp"
#include "runtime.hpp"
#include "session.hpp"

namespace py = pybind11;
using mtp::ErrorKind;

namespace mtp {
void register_chat(py::module_ & m);  // bindings_chat.cpp
}

namespace {

const char * error_class_name(ErrorKind kind) {
    switch (kind) {
        case ErrorKind::ModelLoad: return "ModelLoadError";
        case ErrorKind::MissingMtpHead: return "MissingMTPHeadError";
        case ErrorKind::IncompatibleDraft: return "IncompatibleDraftError";
        case ErrorKind::ContextOverflow: return "ContextOverflowError";
        case ErrorKind::InvalidPrompt: return "InvalidPromptError";
        case ErrorKind::InvalidOption: return "InvalidOptionError";
        case ErrorKind::Grammar: return "GrammarError";
        case ErrorKind::Busy: return "SessionBusyError";
        case ErrorKind::Timeout: return "GenerationTimeoutError";
        case ErrorKind::Cancelled: return "GenerationCancelledError";
        case ErrorKind::Decode: return "DecodeError";
        case ErrorKind::ChatTemplate: return "ChatTemplateError";
        case ErrorKind::ToolSchema: return "ToolSchemaError";
        case ErrorKind::ChatParse: return "ChatParseError";
        case ErrorKind::RpcLost: return "RPCConnectionError";
    }
    return "MTPError";
}

py::str to_str(const std::string & s) {
    PyObject * obj = PyUnicode_DecodeUTF8(s.data(), (Py_ssize_t) s.size(), "replace");
    if (!obj) {
        throw py::error_already_set();
    }
    return py::reinterpret_steal<py::str>(obj);
}

py::dict counters_to_dict(const mtp::Counters & c) {
    py::dict d;
    c.for_each([&](const char * name, uint64_t value) { d[name] = value; });
    const int n = std::max(0, std::min(c.n_draft, mtp::kMaxDraftPositions));
    d["drafted_at"] = std::vector<uint64_t>(c.drafted_at.begin(), c.drafted_at.begin() + n);
    d["accepted_at"] = std::vector<uint64_t>(c.accepted_at.begin(), c.accepted_at.begin() + n);
    d["n_draft"] = c.n_draft;
    return d;
}

// The session's counters, with the draft controller's estimates where it can draft.
py::dict session_stats(const mtp::Session & self, const mtp::Counters & c) {
    py::dict d = counters_to_dict(c);
    if (self.mtp_driver() != "none") {
        d["draft_controller"] = py::cast(self.draft_controller());
    }
    d["draft_vocab_size"] = self.draft_vocab_size();
    return d;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
    m.doc() = "mtp_llm native engine (llama.cpp MTP speculative decoding)";

    // Limits and values the Python options check against (mtp_llm.options).
    m.attr("MAX_DRAFT_POSITIONS") = mtp::kMaxDraftPositions;
    m.attr("MAX_PARALLEL") = mtp::kMaxParallel;
    m.attr("MAX_TOP_LOGPROBS") = mtp::kMaxTopLogprobs;
    m.attr("MIN_SLOT_CONTEXT") = mtp::kMinSlotContext;
    py::tuple rollback_modes(mtp::kRollbackModes.size());
    for (size_t i = 0; i < mtp::kRollbackModes.size(); ++i) rollback_modes[i] = mtp::kRollbackModes[i];
    m.attr("ROLLBACK_MODES") = rollback_modes;

    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const mtp::Error & e) {
            py::object cls = py::module_::import("mtp_llm.errors").attr(error_class_name(e.kind));
            // Messages quote file contents and llama.cpp's log, which need not be valid UTF-8.
            const std::string msg = e.what();
            py::object text = py::reinterpret_steal<py::object>(
                PyUnicode_DecodeUTF8(msg.data(), (Py_ssize_t) msg.size(), "replace"));
            PyErr_SetObject(cls.ptr(), text.ptr());
        }
    });

    // ggml's RPC backend (docs/scale-out.md).
    m.def("rpc_probe", &mtp::probe_rpc_server, py::arg("endpoint"), py::arg("timeout") = 5.0,
          py::call_guard<mtp::ReleaseGil>(),
          "Connect to an RPC server and run the handshake; returns its protocol version or raises ModelLoadError.");
    m.def("rpc_serve", &mtp::serve_rpc, py::arg("endpoint"), py::arg("cache_dir") = "", py::arg("n_threads") = 0,
          py::call_guard<mtp::ReleaseGil>(),
          "Serve this machine's devices with ggml's RPC server (blocks; raises if it cannot listen).");
    m.def("rpc_protocol_version", &mtp::rpc_protocol_version, "ggml's RPC protocol version of this build.");

    m.def("mtp_graph_architectures", &mtp::mtp_graph_architectures,
          "Architectures for which this llama.cpp build has an MTP draft graph.");

    m.def("single_head_mtp_architectures", &mtp::single_head_mtp_architectures,
          "Architectures whose MTP graph runs exactly one head.");

    m.def("inspect_gguf", [](const std::string & path) {
        mtp::GgufInfo info;
        {
            mtp::ReleaseGil release;
            info = mtp::inspect_gguf(path);
        }
        py::dict facts;
        facts["architecture"] = info.architecture;
        facts["n_embd"] = info.n_embd;
        facts["n_vocab"] = info.n_vocab;
        facts["n_nextn"] = info.n_nextn;
        facts["block_count"] = info.block_count;
        facts["has_trunk"] = info.has_trunk;
        facts["has_mtp_tensors"] = info.has_mtp_tensors;
        facts["n_vocab_draft"] = info.n_vocab_draft;
        return facts;
    }, py::arg("path"),
          "What a GGUF header says (metadata and tensor names only, no weights read): architecture, n_embd, "
          "n_vocab, n_nextn, block_count, has_trunk, has_mtp_tensors, n_vocab_draft (a trimmed head's rows, 0 for none). Raises ModelLoadError on a bad file.");

    m.def("list_backends", &mtp::list_backends, "Names of the ggml backends in this build (CPU, CUDA, Vulkan, ...).");
    m.def("list_devices", [] {
        py::list out;
        for (const auto & d : mtp::list_devices()) {
            py::dict e;
            e["name"] = d.name;
            e["description"] = to_str(d.description);
            e["type"] = d.type;
            e["backend"] = d.backend;
            e["memory_free"] = d.memory_free;
            e["memory_total"] = d.memory_total;
            e["variant"] = d.type == "cpu" ? mtp::cpu_backend_info().variant : std::string();
            out.append(e);
        }
        return out;
    }, "ggml's devices with their type, backend, memory in bytes and, for the CPU, the variant loaded.");
    m.def("cpu_backend", [] {
        mtp::ensure_backend();
        const mtp::CpuBackendInfo & info = mtp::cpu_backend_info();
        py::dict out;
        out["runtime_variants"] = info.runtime_variants;
        out["variant"] = info.variant;
        out["path"] = info.path;
        out["built"] = info.built;
        py::dict scores, features;
        for (const auto & [tag, score] : info.scores) {
            scores[py::str(tag)] = score;
        }
        for (const auto & [name, value] : info.features) {
            features[py::str(name)] = value;
        }
        out["scores"] = scores;
        out["features"] = features;
        return out;
    }, "ggml's CPU backend: the variant loaded, its file, the variants built with their scores here, its features.");
    m.def("has_gpu", [] { mtp::ensure_backend(); return mtp::has_accelerator(); },
          "A GPU or integrated-GPU device is there to offload layers to.");
    m.def("other_runnable_threads", &mtp::other_runnable_threads, py::arg("readings") = 1,
          py::call_guard<mtp::ReleaseGil>(),
          "Threads of other processes ready to run (the least of `readings` readings 1 ms apart): what an "
          "adaptive session plans its compute threads around.");

    m.def("score_tokens", [](std::shared_ptr<mtp::Model> model, const std::vector<int32_t> & tokens, int32_t n_batch,
                             int32_t n_threads) {
              mtp::ReleaseGil release;
              return mtp::score_tokens(*model, tokens, n_batch, n_threads);
          },
          py::arg("model"), py::arg("tokens"), py::arg("n_batch") = 512, py::arg("n_threads") = 0,
          "log P(tokens[i+1] | tokens[..i]) for each i (natural log), in a context of its own.");

    m.def("json_schema_grammar", &mtp::json_schema_grammar, py::arg("schema_json"),
          "GBNF grammar accepting exactly the JSON documents that match a JSON schema.");

    // Cost probe (mtp-llm bench --costs): timed llama.cpp passes of the draft/verify loop.
    m.def("measure_costs", [](std::shared_ptr<mtp::Model> target, std::shared_ptr<mtp::Model> draft,
                              const mtp::ContextOptions & options, int fill, int reps, int warmup) {
        mtp::CostCurve c;
        {
            mtp::ReleaseGil release;
            c = mtp::measure_costs(target, draft, options, fill, reps, warmup);
        }
        auto timings = [](const std::vector<mtp::CostTiming> & v) {
            py::list out;
            for (const auto & t : v) out.append(py::make_tuple(t.median_us, t.min_us));
            return out;
        };
        py::dict d;
        d["fill"] = c.fill;
        d["reps"] = c.reps;
        d["n_threads"] = c.n_threads;
        d["n_threads_batch"] = c.n_threads_batch;
        d["flash_attn"] = c.flash_attn;
        d["target_rows"] = timings(c.target_rows);
        d["sample"] = py::make_tuple(c.sample.median_us, c.sample.min_us);
        d["catch_up_rows"] = timings(c.catch_up_rows);
        d["draft_passes"] = timings(c.draft_passes);
        py::list fused;
        for (const auto & per_k : c.fused) fused.append(timings(per_k));
        d["fused"] = fused;
        d["driver"] = c.driver;
        return d;
    }, py::arg("target"), py::arg("draft").none(true), py::arg("options"), py::arg("fill") = 128,
       py::arg("reps") = 20, py::arg("warmup") = 3,
       "Median and minimum microseconds of each pass of the draft/verify loop (see csrc/cost_probe.hpp).");

    // Load options with named fields: mtp_llm.model fills them by field name.
    py::class_<mtp::ModelOptions>(m, "ModelOptions")
        .def(py::init<>())
        .def_readwrite("load_mtp", &mtp::ModelOptions::load_mtp)
        .def_readwrite("n_gpu_layers", &mtp::ModelOptions::n_gpu_layers)
        .def_readwrite("use_mmap", &mtp::ModelOptions::use_mmap)
        .def_readwrite("use_mlock", &mtp::ModelOptions::use_mlock)
        .def_readwrite("rpc_servers", &mtp::ModelOptions::rpc_servers)
        .def_readwrite("tensor_split", &mtp::ModelOptions::tensor_split)
        .def_readwrite("mtp_local", &mtp::ModelOptions::mtp_local)
        .def_readwrite("rpc_timeout", &mtp::ModelOptions::rpc_timeout)
        .def_readwrite("mtp_device", &mtp::ModelOptions::mtp_device);

    py::class_<mtp::Model, std::shared_ptr<mtp::Model>>(m, "Model")
        .def(py::init([](const std::string & path, const mtp::ModelOptions & options) {
                 mtp::ReleaseGil release;
                 return std::make_shared<mtp::Model>(path, options);
             }),
             py::arg("path"), py::arg("options"))
        .def_property_readonly("rpc_servers", [](const mtp::Model & self) { return self.options().rpc_servers; })
        .def_property_readonly("devices", &mtp::Model::device_names)
        .def("check_rpc", &mtp::Model::check_rpc, "Raise RPCConnectionError if a connection to a server was lost.")
        .def_property_readonly("path", &mtp::Model::path)
        .def_property_readonly("load_mtp", [](const mtp::Model & self) { return self.options().load_mtp; })
        .def_property_readonly("n_gpu_layers", [](const mtp::Model & self) { return self.options().n_gpu_layers; })
        .def_property_readonly("mtp_device", [](const mtp::Model & self) { return self.options().mtp_device; })
        .def_property_readonly("architecture", &mtp::Model::architecture)
        .def_property_readonly("description", &mtp::Model::description)
        .def_property_readonly("n_vocab", &mtp::Model::n_vocab)
        .def_property_readonly("n_embd", &mtp::Model::n_embd)
        .def_property_readonly("n_ctx_train", &mtp::Model::n_ctx_train)
        .def_property_readonly("n_layer", &mtp::Model::n_layer)
        .def_property_readonly("n_mtp_heads", &mtp::Model::n_mtp_heads)
        .def_property_readonly("n_params", &mtp::Model::n_params)
        .def_property_readonly("size_bytes", &mtp::Model::size_bytes)
        .def_property_readonly("chat_template", [](const mtp::Model & self) -> py::object {
            std::string t = self.chat_template();
            return t.empty() ? py::object(py::none()) : py::object(to_str(t));
        })
        .def_property_readonly("has_mtp_head", &mtp::Model::has_mtp_head)
        .def_property_readonly("has_mtp_graph", &mtp::Model::has_mtp_graph)
        .def_property_readonly("is_mtp_sidecar", &mtp::Model::is_mtp_sidecar)
        .def_property_readonly("draft_vocab_size", &mtp::Model::draft_vocab_size)
        .def_property_readonly("token_bos", &mtp::Model::token_bos)
        .def_property_readonly("token_eos", &mtp::Model::token_eos)
        .def("is_eog", &mtp::Model::is_eog, py::arg("token"))
        .def("tokenize", &mtp::Model::tokenize, py::arg("text"), py::arg("add_special") = true,
             py::arg("parse_special") = false, py::call_guard<mtp::ReleaseGil>())
        .def("detokenize", [](const mtp::Model & self, const std::vector<int32_t> & tokens, bool render_special) {
                 return to_str(self.detokenize(tokens, render_special));
             }, py::arg("tokens"), py::arg("render_special") = false)
        .def("token_piece", [](const mtp::Model & self, int32_t token, bool render_special) {
                 return py::bytes(self.token_piece(token, render_special));
             }, py::arg("token"), py::arg("render_special") = false)
        .def("embed", &mtp::Model::embed, py::arg("texts"), py::arg("n_threads") = 0,
             py::call_guard<mtp::ReleaseGil>(),
             "Mean-pooled, L2-normalised embeddings of each text.")
        .def("apply_chat_template", [](const mtp::Model & self,
                                       const std::vector<std::pair<std::string, std::string>> & messages,
                                       bool add_generation_prompt, const std::string & chat_template) {
                 return to_str(self.apply_chat_template(messages, add_generation_prompt, chat_template));
             }, py::arg("messages"), py::arg("add_generation_prompt") = true, py::arg("chat_template") = "");

    // Research and test bindings (export checks, head training data, the controllers fed exact times):
    // mtp_llm._core.internals, no stability promise, not part of the package's API.
    py::module_ internals = m.def_submodule("internals", "Bindings for tests and tools; not API.");

    internals.def("forward_with_head", [](const mtp::Model & target, const mtp::Model & head, const std::vector<int32_t> & tokens,
                                  int n_threads) {
        mtp::ForwardResult r;
        {
            mtp::ReleaseGil release;
            r = mtp::forward_with_head(target, head, tokens, n_threads);
        }
        auto as_array = [](const std::vector<float> & v, int32_t rows, int32_t cols) {
            py::array_t<float> a({(py::ssize_t) rows, (py::ssize_t) cols});
            std::memcpy(a.mutable_data(), v.data(), v.size() * sizeof(float));
            return a;
        };
        py::dict d;
        d["trunk_logits"] = as_array(r.trunk_logits, r.n_tokens, r.n_vocab);
        d["trunk_hidden"] = as_array(r.trunk_hidden, r.n_tokens, r.n_embd);
        d["head_logits"] = as_array(r.head_logits, r.n_tokens, r.n_vocab);
        d["head_hidden"] = as_array(r.head_hidden, r.n_tokens, r.n_embd);
        return d;
    }, py::arg("target"), py::arg("head"), py::arg("tokens"), py::arg("n_threads") = 0,
       "Every-position logits and hidden states of the target and the MTP head (export checks).");

    internals.def("trunk_hidden_states", [](const mtp::Model & target, const std::vector<std::vector<int32_t>> & sequences,
                                    int n_threads) {
        std::vector<std::vector<float>> hs;
        {
            mtp::ReleaseGil release;
            hs = mtp::trunk_hidden_states(target, sequences, n_threads);
        }
        const py::ssize_t n_embd = (py::ssize_t) llama_model_n_embd_out(target.get());
        py::list out;
        for (const auto & h : hs) {
            py::array_t<float> a({(py::ssize_t) h.size() / n_embd, n_embd});
            std::memcpy(a.mutable_data(), h.data(), h.size() * sizeof(float));
            out.append(a);
        }
        return out;
    }, py::arg("target"), py::arg("sequences"), py::arg("n_threads") = 0,
       "The trunk's post-norm hidden state of every position of each sequence (head training data).");

    py::class_<mtp::ThreadController>(internals, "ThreadController")
        .def(py::init<int32_t, bool, int32_t, int32_t>(), py::arg("n_threads"), py::arg("adaptive") = true,
             py::arg("cores") = 0, py::arg("others_running") = 0)
        .def("set_load_reader", &mtp::ThreadController::set_load_reader, py::arg("others_running"))
        .def("choose", &mtp::ThreadController::choose)
        .def("observe", &mtp::ThreadController::observe, py::arg("rows"), py::arg("us"))
        .def_property_readonly("current", &mtp::ThreadController::current);

    py::class_<mtp::DraftController>(internals, "DraftController")
        .def(py::init<int32_t>(), py::arg("n_max"))
        .def("choose", &mtp::DraftController::choose, py::arg("limit"), py::arg("streams") = 1, py::arg("threads") = 0,
             py::arg("remaining") = -1, py::arg("queued") = -1)
        .def("observe", &mtp::DraftController::observe, py::arg("drafted"), py::arg("accepted"), py::arg("us"),
             py::arg("head_us"), py::arg("resumed") = false)
        .def("observe_acceptance", &mtp::DraftController::observe_acceptance, py::arg("drafted"), py::arg("accepted"))
        .def("observe_cost", &mtp::DraftController::observe_cost, py::arg("drafted"), py::arg("streams"), py::arg("us"),
             py::arg("head_us"), py::arg("resumed") = false, py::arg("threads") = 0)
        .def("interrupt", &mtp::DraftController::interrupt)
        .def("skip_round", &mtp::DraftController::skip_round)
        .def("estimates", &mtp::DraftController::estimates);

    // What the automatic draft length has learnt (mtp_llm.stats.DraftControllerEstimates reads it by field name).
    py::class_<mtp::ControllerEstimates>(m, "ControllerEstimates")
        .def_readonly("acceptance", &mtp::ControllerEstimates::acceptance)
        .def_readonly("streams", &mtp::ControllerEstimates::streams)
        .def_readonly("threads", &mtp::ControllerEstimates::threads)
        .def_readonly("iteration_us", &mtp::ControllerEstimates::iteration_us)
        .def_readonly("expected_tokens_per_s", &mtp::ControllerEstimates::expected_tokens_per_s)
        .def_readonly("choice", &mtp::ControllerEstimates::choice)
        .def_readonly("probe_interval", &mtp::ControllerEstimates::probe_interval);

    // Option structs with named fields: mtp_llm.options fills them by field name.
    py::class_<mtp::ContextOptions>(m, "ContextOptions")
        .def(py::init<>())
        .def_readwrite("n_draft", &mtp::ContextOptions::n_draft)
        .def_readwrite("n_draft_max", &mtp::ContextOptions::n_draft_max)
        .def_readwrite("p_min", &mtp::ContextOptions::p_min)
        .def_readwrite("adaptive_threads", &mtp::ContextOptions::adaptive_threads)
        .def_readwrite("n_ctx", &mtp::ContextOptions::n_ctx)
        .def_readwrite("n_batch", &mtp::ContextOptions::n_batch)
        .def_readwrite("n_threads", &mtp::ContextOptions::n_threads)
        .def_readwrite("n_threads_batch", &mtp::ContextOptions::n_threads_batch)
        .def_readwrite("flash_attn", &mtp::ContextOptions::flash_attn)
        .def_readwrite("type_k", &mtp::ContextOptions::type_k)
        .def_readwrite("type_v", &mtp::ContextOptions::type_v)
        .def_readwrite("offload_kqv", &mtp::ContextOptions::offload_kqv)
        .def_readwrite("rollback", &mtp::ContextOptions::rollback)
        .def_readwrite("fuse_catch_up", &mtp::ContextOptions::fuse_catch_up)
        .def_readwrite("grammar_drafts", &mtp::ContextOptions::grammar_drafts)
        .def_readwrite("cache_prompt", &mtp::ContextOptions::cache_prompt)
        .def_readwrite("cache_size_mb", &mtp::ContextOptions::cache_size_mb)
        .def_readwrite("n_parallel", &mtp::ContextOptions::n_parallel);

    mtp::register_chat(m);

    py::class_<mtp::SamplingOptions>(m, "SamplingOptions")
        .def(py::init<>())
        .def_readwrite("temp", &mtp::SamplingOptions::temp)
        .def_readwrite("top_k", &mtp::SamplingOptions::top_k)
        .def_readwrite("top_p", &mtp::SamplingOptions::top_p)
        .def_readwrite("min_p", &mtp::SamplingOptions::min_p)
        .def_readwrite("seed", &mtp::SamplingOptions::seed)
        .def_readwrite("repeat_penalty", &mtp::SamplingOptions::repeat_penalty)
        .def_readwrite("frequency_penalty", &mtp::SamplingOptions::frequency_penalty)
        .def_readwrite("presence_penalty", &mtp::SamplingOptions::presence_penalty)
        .def_readwrite("penalty_last_n", &mtp::SamplingOptions::penalty_last_n)
        .def_readwrite("grammar", &mtp::SamplingOptions::grammar)
        .def_readwrite("chat", &mtp::SamplingOptions::chat)
        .def_readwrite("reasoning_budget", &mtp::SamplingOptions::reasoning_budget);

    py::class_<mtp::GenerateOptions>(m, "GenerateOptions")
        .def(py::init<>())
        .def_readwrite("max_tokens", &mtp::GenerateOptions::max_tokens)
        .def_readwrite("n_draft", &mtp::GenerateOptions::n_draft)
        .def_readwrite("cache_prompt", &mtp::GenerateOptions::cache_prompt)
        .def_readwrite("timeout", &mtp::GenerateOptions::timeout)
        .def_readwrite("stop", &mtp::GenerateOptions::stop)
        .def_readwrite("sampling", &mtp::GenerateOptions::sampling)
        .def_readwrite("logprobs", &mtp::GenerateOptions::logprobs)
        .def_readwrite("top_logprobs", &mtp::GenerateOptions::top_logprobs)
        .def_readwrite("draft_temp", &mtp::GenerateOptions::draft_temp);

    py::class_<mtp::Session>(m, "Session")
        .def(py::init([](std::shared_ptr<mtp::Model> target, std::shared_ptr<mtp::Model> draft,
                         const mtp::ContextOptions & options) {
                 mtp::ReleaseGil release;
                 return std::make_unique<mtp::Session>(std::move(target), std::move(draft), options);
             }),
             py::arg("target"), py::arg("draft").none(true), py::arg("options"))
        .def("begin", [](mtp::Session & self, const std::vector<int32_t> & prompt,
                         const mtp::GenerateOptions & options, uint64_t call) {
                 mtp::ReleaseGil release;
                 return self.begin(prompt, options, call);
             },
             py::arg("prompt"), py::arg("options"), py::arg("call") = 0,
             "Start a generation in a free slot; returns the slot. `call`: an id for end_call().")
        .def("end_call", &mtp::Session::end_call, py::arg("call"), py::call_guard<mtp::ReleaseGil>(),
             "End the generation begun with this call id, if it still runs.")
        .def("step", [](mtp::Session & self, int32_t slot) {
            mtp::StepResult r;
            {
                mtp::ReleaseGil release;
                try {
                    r = self.step(slot);
                } catch (const mtp::Error &) {
                    throw;
                } catch (const std::runtime_error & e) {
                    // llama.cpp's grammar sampler throws when a grammar reaches a state no token continues.
                    if (std::strstr(e.what(), "grammar") == nullptr) throw;
                    mtp::fail(ErrorKind::Grammar, std::string("the grammar admits no token here (") + e.what() +
                                                      "): check that each rule can match some text");
                }
            }
            py::list tokens(r.tokens.size());
            for (size_t i = 0; i < r.tokens.size(); ++i) {
                const mtp::TokenOut & t = r.tokens[i];
                if (!t.logprobs) {
                    tokens[i] = py::make_tuple(t.id, to_str(t.text));
                    continue;
                }
                py::list top(t.logprobs->top.size());
                for (size_t k = 0; k < t.logprobs->top.size(); ++k) {
                    top[k] = py::make_tuple(t.logprobs->top[k].first, t.logprobs->top[k].second);
                }
                tokens[i] = py::make_tuple(t.id, to_str(t.text), t.logprobs->logprob, std::move(top));
            }
            return py::make_tuple(std::move(tokens), r.finished,
                                  r.finished ? py::object(py::str(r.finish_reason)) : py::object(py::none()));
        }, py::arg("slot") = 0,
           "Run until this slot has output (a prompt chunk or one draft/verify iteration of every running slot); "
           "returns (tokens, finished, reason); a token is (id, text), or (id, text, logprob, [(id, logprob), ...]) "
           "when the call asked for logprobs.")
        .def("end", py::overload_cast<int32_t>(&mtp::Session::end), py::arg("slot") = 0,
             py::call_guard<mtp::ReleaseGil>())
        .def("cancel", [](mtp::Session & self, int32_t slot) { slot < 0 ? self.cancel() : self.cancel(slot); },
             py::arg("slot") = -1, "Stop a running generation (slot -1: all) at the next graph node (any thread).")
        .def_property_readonly("n_parallel", &mtp::Session::n_parallel)
        .def_property_readonly("n_ctx_slot", &mtp::Session::n_ctx_slot)
        .def_property_readonly("cache_bytes", &mtp::Session::cache_bytes)
        .def_property_readonly("active", &mtp::Session::active)
        .def("stats", [](const mtp::Session & self) { return session_stats(self, self.stats()); })
        .def("call_stats", [](const mtp::Session & self, int32_t slot) { return session_stats(self, self.call_stats(slot)); },
             py::arg("slot") = -1)
        .def("reset_stats", &mtp::Session::reset_stats)
        .def("print_stats", &mtp::Session::print_stats, py::call_guard<mtp::ReleaseGil>())
        .def_property_readonly("n_ctx", &mtp::Session::n_ctx)
        .def_property_readonly("prompt_cache_bytes", &mtp::Session::prompt_cache_bytes)
        .def_property_readonly("n_draft", [](const mtp::Session & self) { return self.options().n_draft; })
        .def_property_readonly("n_draft_max", [](const mtp::Session & self) { return mtp::longest_draft(self.options()); })
        .def_property_readonly("rollback_mode", &mtp::Session::rollback_mode)
        .def_property_readonly("flash_attn", &mtp::Session::flash_attn)
        .def_property_readonly("n_threads", &mtp::Session::n_threads)
        .def_property_readonly("mtp_driver", &mtp::Session::mtp_driver)
        .def_property_readonly("draft_vocab_size", &mtp::Session::draft_vocab_size)
        .def_property_readonly("devices", &mtp::Session::devices);
}
