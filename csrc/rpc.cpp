#include "rpc.hpp"

#ifdef _WIN32
#if !defined(_WIN32_WINNT) || _WIN32_WINNT < 0x0600
#undef _WIN32_WINNT
#define _WIN32_WINNT 0x0600  // WSAPoll
#endif
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <winsock2.h>
#include <ws2tcpip.h>
#else
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>

#include "errors.hpp"
#include "ggml-rpc.h"
#include "runtime.hpp"

namespace mtp {

namespace {

constexpr uint8_t kCmdHello = 14;      // RPC_CMD_HELLO, fixed by the protocol
constexpr size_t kConnCaps = 24;       // RPC_CONN_CAPS_SIZE

// The few socket calls the probe makes, on POSIX (Linux, macOS) and on Winsock.
#ifdef _WIN32
using SocketHandle = SOCKET;
constexpr SocketHandle kNoSocket = INVALID_SOCKET;
constexpr int kSendFlags = 0;
int socket_error() { return WSAGetLastError(); }
std::string error_text(int err) { return "Winsock error " + std::to_string(err); }
bool interrupted(int err) { return err == WSAEINTR; }
bool would_block(int err) { return err == WSAEWOULDBLOCK; }
bool connect_pending(int err) { return err == WSAEWOULDBLOCK || err == WSAEINPROGRESS; }
int poll_one(pollfd * p, int timeout_ms) { return WSAPoll(p, 1, timeout_ms); }
void close_socket(SocketHandle s) { closesocket(s); }

SocketHandle open_stream_socket() {
    static const bool started = [] {  // once per process; ggml's RPC client starts its own
        WSADATA data;
        return WSAStartup(MAKEWORD(2, 2), &data) == 0;
    }();
    if (!started) {
        return kNoSocket;
    }
    SocketHandle s = ::socket(AF_INET, SOCK_STREAM, 0);
    u_long nonblocking = 1;
    if (s != kNoSocket && ioctlsocket(s, FIONBIO, &nonblocking) != 0) {
        closesocket(s);
        return kNoSocket;
    }
    return s;
}
#else
using SocketHandle = int;
constexpr SocketHandle kNoSocket = -1;
#ifdef MSG_NOSIGNAL
constexpr int kSendFlags = MSG_NOSIGNAL;
#else
constexpr int kSendFlags = 0;  // macOS: SO_NOSIGPIPE on the socket instead
#endif
int socket_error() { return errno; }
std::string error_text(int err) { return std::strerror(err); }
bool interrupted(int err) { return err == EINTR; }
bool would_block(int err) { return err == EAGAIN || err == EWOULDBLOCK; }
bool connect_pending(int err) { return err == EINPROGRESS; }
int poll_one(pollfd * p, int timeout_ms) { return ::poll(p, 1, timeout_ms); }
void close_socket(SocketHandle s) { ::close(s); }

SocketHandle open_stream_socket() {
#if defined(SOCK_NONBLOCK) && defined(SOCK_CLOEXEC)
    return ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
#else
    const SocketHandle s = ::socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) {
        return kNoSocket;
    }
    const int flags = ::fcntl(s, F_GETFL, 0);
    if (flags < 0 || ::fcntl(s, F_SETFL, flags | O_NONBLOCK) != 0 || ::fcntl(s, F_SETFD, FD_CLOEXEC) != 0) {
        ::close(s);
        return kNoSocket;
    }
#ifdef SO_NOSIGPIPE
    const int on = 1;
    ::setsockopt(s, SOL_SOCKET, SO_NOSIGPIPE, &on, sizeof(on));
#endif
    return s;
#endif
}
#endif

// A socket closed on scope exit.
class Socket {
public:
    explicit Socket(SocketHandle s) : s_(s) {}
    ~Socket() {
        if (s_ != kNoSocket) close_socket(s_);
    }
    Socket(const Socket &) = delete;
    Socket & operator=(const Socket &) = delete;
    SocketHandle get() const { return s_; }

private:
    SocketHandle s_;
};

struct Endpoint {
    std::string host;
    int port = 0;
};

Endpoint parse(const std::string & endpoint) {
    const size_t colon = endpoint.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == endpoint.size()) {
        fail(ErrorKind::ModelLoad, "RPC endpoint '" + endpoint + "' is not host:port (e.g. 192.168.1.20:50052)");
    }
    Endpoint e;
    e.host = endpoint.substr(0, colon);
    const std::string port = endpoint.substr(colon + 1);
    if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) {
        fail(ErrorKind::ModelLoad, "RPC endpoint '" + endpoint + "' has no valid port (1..65535)");
    }
    e.port = std::stoi(port);
    if (e.port < 1 || e.port > 65535) {
        fail(ErrorKind::ModelLoad, "RPC endpoint '" + endpoint + "' has no valid port (1..65535)");
    }
    if (e.host.find(':') != std::string::npos) {
        fail(ErrorKind::ModelLoad, "RPC endpoint '" + endpoint + "': ggml's RPC transport speaks IPv4 only");
    }
    return e;
}

// Waits for `events` on socket `s` until the deadline; false on timeout.
bool wait_for(SocketHandle s, short events, int64_t deadline_us) {
    for (;;) {
        const int64_t left_ms = (deadline_us - now_us()) / 1000;
        if (left_ms <= 0) return false;
        pollfd p = {};
        p.fd = s;
        p.events = events;
        const int r = poll_one(&p, (int) left_ms);
        if (r > 0) return true;
        if (r == 0) return false;
        if (!interrupted(socket_error())) return false;
    }
}

// Sends or receives exactly `n` bytes before the deadline.
bool transfer(SocketHandle s, void * buf, size_t n, bool sending, int64_t deadline_us) {
    auto * p = static_cast<char *>(buf);
    size_t done = 0;
    while (done < n) {
        if (!wait_for(s, sending ? POLLOUT : POLLIN, deadline_us)) return false;
        const int chunk = (int) std::min<size_t>(n - done, 1 << 20);
        const auto r = sending ? ::send(s, p + done, chunk, kSendFlags) : ::recv(s, p + done, chunk, 0);
        if (r > 0) {
            done += (size_t) r;
        } else if (r == 0 || (!interrupted(socket_error()) && !would_block(socket_error()))) {
            return false;
        }
    }
    return true;
}

}  // namespace

void check_endpoint(const std::string & endpoint) { (void) parse(endpoint); }

std::string rpc_protocol_version() {
    return std::to_string(RPC_PROTO_MAJOR_VERSION) + "." + std::to_string(RPC_PROTO_MINOR_VERSION) + "." +
           std::to_string(RPC_PROTO_PATCH_VERSION);
}

RpcStopScope::RpcStopScope(bool active, bool (*stop)(void *), void * data, double grace_s) : active_(active) {
    if (active_) {
        ggml_backend_rpc_set_thread_stop(stop, data, grace_s);
    }
}

RpcStopScope::~RpcStopScope() {
    if (active_) {
        ggml_backend_rpc_set_thread_stop(nullptr, nullptr, 0.0);
    }
}

int rpc_connection_state(const std::string & endpoint) {
    return ggml_backend_rpc_connection_state(endpoint.c_str());
}

bool rpc_connection_alive(const std::string & endpoint) {
    return ggml_backend_rpc_connection_state(endpoint.c_str()) == 1;
}

std::string probe_rpc_server(const std::string & endpoint, double timeout_s) {
    const Endpoint e = parse(endpoint);
    ensure_backend();
    if (rpc_connection_alive(endpoint)) {
        // ggml's server takes one client at a time: ours is that client already.
        return rpc_protocol_version();
    }
    const int64_t deadline = now_us() + (int64_t) (timeout_s * 1e6);
    const std::string where = "RPC server " + endpoint;

    addrinfo hints{};
    hints.ai_family = AF_INET;  // what ggml's client connects with
    hints.ai_socktype = SOCK_STREAM;
    addrinfo * found = nullptr;
    if (int rc = ::getaddrinfo(e.host.c_str(), std::to_string(e.port).c_str(), &hints, &found); rc != 0) {
        fail(ErrorKind::ModelLoad, where + ": cannot resolve host '" + e.host + "' (" + gai_strerror(rc) + ")");
    }
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addrs(found, ::freeaddrinfo);

    Socket sock(open_stream_socket());
    if (sock.get() == kNoSocket) {
        fail(ErrorKind::ModelLoad, where + ": cannot create a socket (" + error_text(socket_error()) + ")");
    }
    if (::connect(sock.get(), addrs->ai_addr, (int) addrs->ai_addrlen) != 0) {
        if (const int err = socket_error(); !connect_pending(err)) {
            fail(ErrorKind::ModelLoad, where + " is unreachable (" + error_text(err) +
                                           "): start it with `mtp-llm rpc-server --host ... --port " +
                                           std::to_string(e.port) + "` on that machine");
        }
        if (!wait_for(sock.get(), POLLOUT, deadline)) {
            fail(ErrorKind::ModelLoad, where + " did not accept a connection within " +
                                           std::to_string((int) timeout_s) + " s (host down or port filtered?)");
        }
        int err = 0;
        socklen_t len = sizeof(err);
        ::getsockopt(sock.get(), SOL_SOCKET, SO_ERROR, reinterpret_cast<char *>(&err), &len);
        if (err != 0) {
            fail(ErrorKind::ModelLoad, where + " is unreachable (" + error_text(err) +
                                           "): start it with `mtp-llm rpc-server --host ... --port " +
                                           std::to_string(e.port) + "` on that machine");
        }
    }
    // HELLO: | cmd (1 byte) | size (8 bytes) | conn_caps | -> | size (8 bytes) | major minor patch pad conn_caps |
    uint8_t request[1 + 8 + kConnCaps] = {};
    request[0] = kCmdHello;
    const uint64_t request_size = kConnCaps;
    std::memcpy(request + 1, &request_size, sizeof(request_size));
    uint64_t response_size = 0;
    uint8_t response[4 + kConnCaps] = {};
    if (!transfer(sock.get(), request, sizeof(request), true, deadline) ||
        !transfer(sock.get(), &response_size, sizeof(response_size), false, deadline)) {
        fail(ErrorKind::ModelLoad, where + " accepted the connection but did not answer the RPC handshake within " +
                                       std::to_string((int) std::max(1.0, timeout_s)) +
                                       " s: it serves one client at a time (is another process using it?), "
                                       "or it is not a ggml RPC server");
    }
    if (response_size != sizeof(response) || !transfer(sock.get(), response, sizeof(response), false, deadline)) {
        fail(ErrorKind::ModelLoad, where + " answered the handshake with a malformed response: it is not a "
                                       "compatible ggml RPC server (this build speaks protocol " +
                                       rpc_protocol_version() + ")");
    }
    const std::string version = std::to_string(response[0]) + "." + std::to_string(response[1]) + "." +
                                std::to_string(response[2]);
    if (response[0] != RPC_PROTO_MAJOR_VERSION || response[1] > RPC_PROTO_MINOR_VERSION) {
        fail(ErrorKind::ModelLoad, where + " speaks RPC protocol " + version + ", this build " +
                                       rpc_protocol_version() + ": run the same mtp-llm (llama.cpp) version on "
                                       "both machines");
    }
    return version;
}

std::vector<ggml_backend_dev_t> rpc_devices(const std::string & endpoint, double timeout_s) {
    probe_rpc_server(endpoint, timeout_s);
    clear_log();
    ggml_backend_reg_t reg = ggml_backend_rpc_add_server(endpoint.c_str());
    if (reg == nullptr || ggml_backend_rpc_connection_state(endpoint.c_str()) == 0) {
        fail(ErrorKind::ModelLoad, with_log("RPC server " + endpoint + " offers no device, or the connection "
                                            "was lost while listing them"));
    }
    std::vector<ggml_backend_dev_t> devs;
    for (size_t i = 0; i < ggml_backend_reg_dev_count(reg); ++i) {
        devs.push_back(ggml_backend_reg_dev_get(reg, i));
    }
    return devs;
}

void serve_rpc(const std::string & endpoint, const std::string & cache_dir, int n_threads) {
    const Endpoint e = parse(endpoint);
    in_addr addr{};
    if (::inet_pton(AF_INET, e.host.c_str(), &addr) != 1) {
        fail(ErrorKind::InvalidOption, "rpc-server host must be an IPv4 address (got '" + e.host + "')");
    }
    ensure_backend();
    std::vector<ggml_backend_dev_t> devices;
    ggml_backend_dev_t cpu = nullptr;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        const auto type = ggml_backend_dev_type(dev);
        if (type == GGML_BACKEND_DEVICE_TYPE_GPU || type == GGML_BACKEND_DEVICE_TYPE_IGPU) {
            devices.push_back(dev);
        } else if (type == GGML_BACKEND_DEVICE_TYPE_CPU && cpu == nullptr) {
            cpu = dev;
        }
    }
    if (devices.empty() && cpu != nullptr) {
        devices.push_back(cpu);
    }
    if (devices.empty()) {
        fail(ErrorKind::InvalidOption, "rpc-server: no device to serve");
    }
    const size_t threads = n_threads > 0 ? (size_t) n_threads : (size_t) default_threads();
    ggml_backend_rpc_start_server(endpoint.c_str(), cache_dir.empty() ? nullptr : cache_dir.c_str(), threads,
                                  devices.size(), devices.data());
    std::fflush(stdout);
    fail(ErrorKind::InvalidOption, "rpc-server could not listen on " + endpoint + " (port in use?)");
}

}  // namespace mtp
