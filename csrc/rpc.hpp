// ggml's RPC backend: checked endpoints, remote devices, the server loop.
//
// ggml's RPC client aborts the process when a connection fails at connect time
// (patches/ggml-rpc/0001 turns later failures into a "lost" connection state).
// Every endpoint is therefore probed here first, with our own socket and a
// timeout: TCP connect + the HELLO handshake and its protocol version.
#pragma once

#include <string>
#include <vector>

#include "ggml-backend.h"

namespace mtp {

// Throws Error(ModelLoad) unless `endpoint` is "host:port" with a port in 1..65535.
void check_endpoint(const std::string & endpoint);

// Connects to `endpoint` and runs the RPC HELLO handshake within `timeout_s`;
// throws Error(ModelLoad) naming what failed (unreachable, busy, not an RPC
// server, protocol version). Returns the server's "major.minor.patch".
// An endpoint this process is already connected to is checked on that connection.
std::string probe_rpc_server(const std::string & endpoint, double timeout_s);

// The devices the server at `endpoint` offers (probed first); they are not added
// to the global registry, so models loaded without rpc_servers stay local.
std::vector<ggml_backend_dev_t> rpc_devices(const std::string & endpoint, double timeout_s);

// True while this process's connection to `endpoint` is open and healthy.
bool rpc_connection_alive(const std::string & endpoint);
// 1 open and healthy, 0 lost, -1 none open (see ggml_backend_rpc_connection_state).
int rpc_connection_state(const std::string & endpoint);

// Serves this machine's devices (accelerators, else the CPU) on `endpoint` with
// ggml's RPC server; returns only when the server cannot start (port in use, bad host).
void serve_rpc(const std::string & endpoint, const std::string & cache_dir, int n_threads);

// While it lives, the RPC commands this thread waits on give up on a server that has answered
// nothing for `grace_s` seconds after `stop(data)` turned true (the call timed out or was
// cancelled), so a stopped server cannot hold the call forever (patches/ggml-rpc/0002).
// Sets nothing unless `active`.
class RpcStopScope {
public:
    RpcStopScope(bool active, bool (*stop)(void *), void * data, double grace_s);
    ~RpcStopScope();
    RpcStopScope(const RpcStopScope &) = delete;
    RpcStopScope & operator=(const RpcStopScope &) = delete;

private:
    bool active_;
};

// ggml's RPC protocol version, "major.minor.patch".
std::string rpc_protocol_version();

}  // namespace mtp
