// Thin pybind11 layer over the engine: argument conversion, GIL release,
// error translation. No logic lives here.
#include <pybind11/pybind11.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>

#include "engine.hpp"

namespace py = pybind11;
using mtp::ErrorKind;

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
    d["iters"] = c.iters;
    d["replays"] = c.replays;
    d["drafts_generated"] = c.drafts_generated;
    d["drafts_accepted"] = c.drafts_accepted;
    d["tokens_emitted"] = c.tokens_emitted;
    d["prompt_tokens"] = c.prompt_tokens;
    d["generations"] = c.generations;
    d["t_draft_us"] = c.t_draft_us;
    d["t_verify_us"] = c.t_verify_us;
    d["t_sample_us"] = c.t_sample_us;
    d["t_ckpt_us"] = c.t_ckpt_us;
    d["t_total_us"] = c.t_total_us;
    d["t_prompt_us"] = c.t_prompt_us;
    d["t_first_token_us"] = c.t_first_token_us;
    const int n = std::max(0, std::min(c.n_draft, mtp::kMaxDraftPositions));
    d["drafted_at"] = std::vector<uint64_t>(c.drafted_at.begin(), c.drafted_at.begin() + n);
    d["accepted_at"] = std::vector<uint64_t>(c.accepted_at.begin(), c.accepted_at.begin() + n);
    d["n_draft"] = c.n_draft;
    return d;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
    m.doc() = "mtp_llm native engine (llama.cpp MTP speculative decoding)";

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

    m.def("recent_log", &mtp::recent_log, "Last llama.cpp log lines (for diagnostics).");
    m.def("set_log_echo", &mtp::set_log_echo, py::arg("echo"), "Echo llama.cpp's log to stderr.");
    m.def("inspect_gguf", [](const std::string & path) {
        const mtp::GgufInfo info = mtp::inspect_gguf(path);
        py::dict d;
        d["architecture"] = info.architecture;
        d["n_embd"] = info.n_embd;
        d["n_vocab"] = info.n_vocab;
        d["n_nextn"] = info.n_nextn;
        d["block_count"] = info.block_count;
        d["has_trunk"] = info.has_trunk;
        d["has_mtp_tensors"] = info.has_mtp_tensors;
        return d;
    }, py::arg("path"));

    m.def("mtp_graph_architectures", &mtp::mtp_graph_architectures,
          "Architectures for which this llama.cpp build has an MTP draft graph.");

    m.def("single_head_mtp_architectures", &mtp::single_head_mtp_architectures,
          "Architectures whose MTP graph runs exactly one head.");

    m.def("json_schema_grammar", &mtp::json_schema_grammar, py::arg("schema_json"),
          "GBNF grammar accepting exactly the JSON documents that match a JSON schema.");

    py::class_<mtp::Model, std::shared_ptr<mtp::Model>>(m, "Model")
        .def(py::init([](const std::string & path, bool load_mtp, int n_gpu_layers, bool use_mmap, bool use_mlock) {
                 mtp::ModelOptions o;
                 o.load_mtp = load_mtp;
                 o.n_gpu_layers = n_gpu_layers;
                 o.use_mmap = use_mmap;
                 o.use_mlock = use_mlock;
                 py::gil_scoped_release release;
                 return std::make_shared<mtp::Model>(path, o);
             }),
             py::arg("path"), py::arg("load_mtp") = true, py::arg("n_gpu_layers") = 0,
             py::arg("use_mmap") = true, py::arg("use_mlock") = false)
        .def_property_readonly("path", &mtp::Model::path)
        .def_property_readonly("load_mtp", [](const mtp::Model & self) { return self.options().load_mtp; })
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
        .def_property_readonly("token_bos", &mtp::Model::token_bos)
        .def_property_readonly("token_eos", &mtp::Model::token_eos)
        .def("is_eog", &mtp::Model::is_eog, py::arg("token"))
        .def("tokenize", &mtp::Model::tokenize, py::arg("text"), py::arg("add_special") = true,
             py::arg("parse_special") = false)
        .def("detokenize", [](const mtp::Model & self, const std::vector<int32_t> & tokens, bool render_special) {
                 return to_str(self.detokenize(tokens, render_special));
             }, py::arg("tokens"), py::arg("render_special") = false)
        .def("token_piece", [](const mtp::Model & self, int32_t token, bool render_special) {
                 return py::bytes(self.token_piece(token, render_special));
             }, py::arg("token"), py::arg("render_special") = false)
        .def("embed", &mtp::Model::embed, py::arg("texts"), py::arg("n_threads") = 0,
             py::call_guard<py::gil_scoped_release>(),
             "Mean-pooled, L2-normalised embeddings of each text.")
        .def("apply_chat_template", [](const mtp::Model & self,
                                       const std::vector<std::pair<std::string, std::string>> & messages,
                                       bool add_generation_prompt, const std::string & chat_template) {
                 return to_str(self.apply_chat_template(messages, add_generation_prompt, chat_template));
             }, py::arg("messages"), py::arg("add_generation_prompt") = true, py::arg("chat_template") = "");

    m.def("forward_with_head", [](const mtp::Model & target, const mtp::Model & head, const std::vector<int32_t> & tokens,
                                  int n_threads) {
        mtp::ForwardResult r;
        {
            py::gil_scoped_release release;
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

    py::class_<mtp::Session>(m, "Session")
        .def(py::init([](std::shared_ptr<mtp::Model> target, std::shared_ptr<mtp::Model> draft, int n_draft,
                         int n_ctx, int n_batch, int n_threads, int n_threads_batch, int flash_attn, int type_k,
                         int type_v, bool offload_kqv, bool use_rs_rollback) {
                 mtp::ContextOptions o;
                 o.n_draft = n_draft;
                 o.n_ctx = n_ctx;
                 o.n_batch = n_batch;
                 o.n_threads = n_threads;
                 o.n_threads_batch = n_threads_batch;
                 o.flash_attn = flash_attn;
                 o.type_k = type_k;
                 o.type_v = type_v;
                 o.offload_kqv = offload_kqv;
                 o.use_rs_rollback = use_rs_rollback;
                 py::gil_scoped_release release;
                 return std::make_unique<mtp::Session>(std::move(target), std::move(draft), o);
             }),
             py::arg("target"), py::arg("draft").none(true), py::arg("n_draft"), py::arg("n_ctx"),
             py::arg("n_batch"), py::arg("n_threads"), py::arg("n_threads_batch"), py::arg("flash_attn"),
             py::arg("type_k"), py::arg("type_v"), py::arg("offload_kqv"), py::arg("use_rs_rollback"))
        .def("begin", [](mtp::Session & self, const std::vector<int32_t> & prompt, int max_tokens, int n_draft,
                         double timeout, const std::vector<std::string> & stop, float temp, int top_k, float top_p,
                         float min_p, uint32_t seed, float repeat_penalty, float frequency_penalty,
                         float presence_penalty, int penalty_last_n, const std::string & grammar) {
                 mtp::GenerateOptions g;
                 g.max_tokens = max_tokens;
                 g.n_draft = n_draft;
                 g.timeout_s = timeout;
                 g.stop = stop;
                 g.sampling.temp = temp;
                 g.sampling.top_k = top_k;
                 g.sampling.top_p = top_p;
                 g.sampling.min_p = min_p;
                 g.sampling.seed = seed;
                 g.sampling.repeat_penalty = repeat_penalty;
                 g.sampling.frequency_penalty = frequency_penalty;
                 g.sampling.presence_penalty = presence_penalty;
                 g.sampling.penalty_last_n = penalty_last_n;
                 g.sampling.grammar = grammar;
                 py::gil_scoped_release release;
                 self.begin(prompt, g);
             },
             py::arg("prompt"), py::arg("max_tokens"), py::arg("n_draft"), py::arg("timeout"), py::arg("stop"),
             py::arg("temp"), py::arg("top_k"), py::arg("top_p"), py::arg("min_p"), py::arg("seed"),
             py::arg("repeat_penalty"), py::arg("frequency_penalty"), py::arg("presence_penalty"),
             py::arg("penalty_last_n"), py::arg("grammar"))
        .def("step", [](mtp::Session & self) {
            mtp::StepResult r;
            {
                py::gil_scoped_release release;
                r = self.step();
            }
            py::list tokens(r.tokens.size());
            for (size_t i = 0; i < r.tokens.size(); ++i) {
                tokens[i] = py::make_tuple(r.tokens[i].id, to_str(r.tokens[i].text));
            }
            return py::make_tuple(std::move(tokens), r.finished,
                                  r.finished ? py::object(py::str(r.finish_reason)) : py::object(py::none()));
        }, "Run one step (a prompt chunk or one draft/verify iteration); returns (tokens, finished, reason).")
        .def("end", &mtp::Session::end)
        .def("cancel", &mtp::Session::cancel, "Stop the running generation at the next graph node (any thread).")
        .def_property_readonly("active", &mtp::Session::active)
        .def("stats", [](const mtp::Session & self) { return counters_to_dict(self.stats()); })
        .def("call_stats", [](const mtp::Session & self) { return counters_to_dict(self.call_stats()); })
        .def("reset_stats", &mtp::Session::reset_stats)
        .def("print_stats", &mtp::Session::print_stats, py::call_guard<py::gil_scoped_release>())
        .def_property_readonly("n_ctx", &mtp::Session::n_ctx)
        .def_property_readonly("n_draft", [](const mtp::Session & self) { return self.options().n_draft; })
        .def_property_readonly("rollback_mode", &mtp::Session::rollback_mode)
        .def_property_readonly("flash_attn", &mtp::Session::flash_attn);
}
