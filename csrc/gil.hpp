// Releasing the GIL around native work in a way that survives interpreter exit.
//
// While the interpreter finalizes (the main thread returned, or called sys.exit, with a daemon
// thread inside a generation), CPython ends any other thread that takes the GIL with pthread_exit,
// whose forced unwind aborts the process ("terminate called without an active exception") when it
// crosses a noexcept frame, as pybind11's gil_scoped_release destructor is. ReleaseGil instead
// parks such a thread before it asks for the GIL (it sleeps until the process exits; the interpreter
// is gone for it anyway), and its destructor lets the unwind pass should finalization begin while
// it waits for the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <thread>

namespace mtp {

inline bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing() != 0;
#else
    return _Py_IsFinalizing() != 0;
#endif
}

class ReleaseGil {
public:
    ReleaseGil() : state_(PyEval_SaveThread()) {}
    ~ReleaseGil() noexcept(false) {
        while (interpreter_finalizing()) {
            std::this_thread::sleep_for(std::chrono::hours(1));
        }
        PyEval_RestoreThread(state_);
    }
    ReleaseGil(const ReleaseGil &) = delete;
    ReleaseGil & operator=(const ReleaseGil &) = delete;

private:
    PyThreadState * state_;
};

}  // namespace mtp
