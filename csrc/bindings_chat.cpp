// pybind11 layer of the chat layer (chat.hpp): conversion and GIL release only.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "chat.hpp"
#include "gil.hpp"
#include "options.hpp"

namespace py = pybind11;

namespace mtp {

namespace {

py::str utf8(const std::string & s) {
    PyObject * obj = PyUnicode_DecodeUTF8(s.data(), (Py_ssize_t) s.size(), "replace");
    if (!obj) {
        throw py::error_already_set();
    }
    return py::reinterpret_steal<py::str>(obj);
}

}  // namespace

void register_chat(py::module_ & m) {
    py::class_<ChatGrammar>(m, "ChatGrammar")
        .def(py::init<>())
        .def_readwrite("lazy", &ChatGrammar::lazy)
        .def_readwrite("trigger_words", &ChatGrammar::trigger_words)
        .def_readwrite("trigger_patterns", &ChatGrammar::trigger_patterns)
        .def_readwrite("preserved_tokens", &ChatGrammar::preserved_tokens)
        .def_readwrite("generation_prompt", &ChatGrammar::generation_prompt)
        .def_readwrite("thinking_start", &ChatGrammar::thinking_start)
        .def_readwrite("thinking_end", &ChatGrammar::thinking_end);

    py::class_<ChatPrompt>(m, "ChatPrompt")
        .def_property_readonly("prompt", [](const ChatPrompt & p) { return utf8(p.prompt); })
        .def_readonly("format", &ChatPrompt::format)
        .def_readonly("grammar", &ChatPrompt::grammar)
        .def_readonly("grammar_lazy", &ChatPrompt::grammar_lazy)
        .def_readonly("trigger_words", &ChatPrompt::trigger_words)
        .def_readonly("trigger_patterns", &ChatPrompt::trigger_patterns)
        .def_readonly("preserved_tokens", &ChatPrompt::preserved_tokens)
        .def_readonly("additional_stops", &ChatPrompt::additional_stops)
        .def_readonly("generation_prompt", &ChatPrompt::generation_prompt)
        .def_readonly("supports_thinking", &ChatPrompt::supports_thinking)
        .def_readonly("thinking_start", &ChatPrompt::thinking_start)
        .def_readonly("thinking_end", &ChatPrompt::thinking_end);

    py::class_<ChatTemplates>(m, "ChatTemplates")
        .def(py::init([](std::shared_ptr<Model> model, const std::string & override_template) {
                 ReleaseGil release;
                 return std::make_unique<ChatTemplates>(std::move(model), override_template);
             }),
             py::arg("model"), py::arg("chat_template") = "")
        .def("apply", [](const ChatTemplates & self, const std::string & messages_json, const std::string & tools_json,
                         const std::string & tool_choice, bool parallel_tool_calls, bool enable_thinking,
                         bool extract_reasoning, bool add_generation_prompt, const std::string & reasoning_effort) {
                 ChatRequest r;
                 r.messages_json = messages_json;
                 r.tools_json = tools_json;
                 r.tool_choice = tool_choice;
                 r.parallel_tool_calls = parallel_tool_calls;
                 r.enable_thinking = enable_thinking;
                 r.extract_reasoning = extract_reasoning;
                 r.add_generation_prompt = add_generation_prompt;
                 r.reasoning_effort = reasoning_effort;
                 ReleaseGil release;
                 return self.apply(r);
             },
             py::arg("messages_json"), py::arg("tools_json") = "", py::arg("tool_choice") = "auto",
             py::arg("parallel_tool_calls") = false, py::arg("enable_thinking") = true,
             py::arg("extract_reasoning") = true, py::arg("add_generation_prompt") = true,
             py::arg("reasoning_effort") = "",
             "Render OpenAI-format messages and tools with the template; the prompt and how to generate and parse.")
        .def_property_readonly("caps", [](const ChatTemplates & self) {
            py::dict d;
            for (const auto & [name, value] : self.caps()) d[py::str(name)] = value;
            return d;
        })
        .def_property_readonly("source", [](const ChatTemplates & self) { return utf8(self.source()); })
        .def_property_readonly("label", &ChatTemplates::label);

    py::class_<ChatParser>(m, "ChatParser")
        .def(py::init<const ChatPrompt &>(), py::arg("prompt"))
        .def("parse", [](const ChatParser & self, const std::string & text, bool partial) {
                 ChatMessage msg;
                 {
                     ReleaseGil release;
                     msg = self.parse(text, partial);
                 }
                 py::list calls;
                 for (const auto & c : msg.tool_calls) {
                     calls.append(py::make_tuple(utf8(c.name), utf8(c.arguments), utf8(c.id)));
                 }
                 return py::make_tuple(utf8(msg.content), utf8(msg.reasoning_content), calls);
             },
             py::arg("text"), py::arg("partial") = false,
             "(content, reasoning_content, [(name, arguments_json, id), ...]) of the output so far.");
}

}  // namespace mtp
