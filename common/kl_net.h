/* kl_net.h - kiln's wire: ZeroMQ sockets carrying one kiln.Envelope per
 * frame, CURVE security with an allow-list, and the Envelope codec. The
 * message flow built on it is docs/protocol.md.
 *
 * The coordinator binds one ROUTER (kl_net_server_new); each agent connects
 * one DEALER (kl_net_client_new). With security on (the default), the
 * server holds a keypair and admits only clients whose public key is in
 * its allow-list directory (a ZAP handler thread checks every handshake);
 * a client pins the server's public key. Key files hold the Z85 text of
 * one key (40 characters) and a newline: NAME.key is the secret key
 * (mode 0600), NAME.pub the public one.
 *
 * Frames that do not decode, exceed KL_NET_MAX_FRAME or fail the bounds
 * checks are dropped and counted (kl_net_stats), never trusted.
 */
#ifndef KL_NET_H
#define KL_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln.pb-c.h"

#define KL_PROTO_MAJOR 1
/* Minor 1 added ROLE_CONSTANT (constant inputs, prepared once): a 1.0
 * agent drops such a request as malformed, so a coordinator refuses
 * agents below KL_PROTO_MINOR_AGENT_MIN in their Hello. Minor 2 added
 * the job <-> head messages (JobHello ... DrainReply, docs/protocol.md);
 * agents never see them, so 1.1 agents stay welcome. Minor 3 added
 * JobStatus.state and waiting_target (a 1.2 kiln fleet ignores them).
 * Minor 4 added DTYPE_U8 and DTYPE_S8 (integer workloads): an agent below
 * 1.4 drops a request with such an argument as malformed, so integer
 * workloads need 1.4 agents; float workloads go to any 1.1+ agent
 * (dispatch keeps each agent's minor and checks kl_dreq_t.need_minor).
 * Minor 5 added DeviceInfo.features (CPU features such as "vnni"): a
 * task for a refined target ("cpu/x86_64-avx512+vnni") goes only to
 * devices listing them, so never to a 1.4 agent; the rest is unchanged.
 * Minor 6 added JobResult.limit (a head's limit refused the request),
 * StatusReply.all_jobs and DrainReply.error (operator keys of kiln serve);
 * agents never see them. */
#define KL_PROTO_MINOR 6
#define KL_PROTO_MINOR_AGENT_MIN 1

/* Largest frame accepted (bytes). */
#define KL_NET_MAX_FRAME (64u << 20)
/* Bounds checked on every decoded message. */
#define KL_NET_MAX_CANDIDATES 4096
#define KL_NET_MAX_ARGS 64
#define KL_NET_MAX_DIMS 8
#define KL_NET_MAX_SOURCE (4u << 20)
#define KL_NET_MAX_SAMPLES 100000
#define KL_NET_MAX_DEVICES 64
/* Names, targets, entry symbols, host names (bytes). */
#define KL_NET_MAX_STRING 4096
/* JobHello.targets and JobStatus.targets entries. */
#define KL_NET_MAX_TARGETS 64
/* StatusReply.agents and StatusReply.jobs entries. */
#define KL_NET_MAX_PEERS 4096
/* MeasureResult.error and Goodbye.reason (bytes): senders truncate. */
#define KL_NET_MAX_ERROR (64u << 10)
/* DeviceInfo.measure_cores entries. */
#define KL_NET_MAX_CORES 4096

typedef struct {
    /* Server: directory holding NAME.key and NAME.pub of this side.
     * Client: the same, for the agent's own keypair. */
    const char *keys_dir;
    const char *name;
    /* Server: directory of allowed client *.pub files (rescanned when an
     * unknown key knocks, at most every 0.2 s, so keys added while running
     * are picked up).
     * NULL means keys_dir. */
    const char *allow_dir;
    /* Server: a second directory of allowed *.pub files, read (and
     * rescanned) with allow_dir; may be missing (no key from it). kiln
     * serve's KEYS/operators on its client socket. NULL: none. */
    const char *also_allow_dir;
    /* Client: file holding the server's public key. */
    const char *server_key_file;
    /* No CURVE at all. Allowed only for loopback endpoints (tcp://127.x,
     * tcp://localhost, tcp://[::1], ipc://, inproc://); otherwise
     * KL_ERR_INVAL "--insecure is for loopback only". Logs a warning. */
    bool insecure;
} kl_net_security_t;

/* Writes DIR/NAME.key (mode 0600) and DIR/NAME.pub with a fresh CURVE
 * keypair, creating DIR if needed. Refuses (KL_ERR_EXISTS) to overwrite an
 * existing key. */
int kl_net_keygen(const char *dir, const char *name, char *err);
/* Reads one Z85 key file into out (41 bytes, NUL-terminated). A missing
 * file, a file that is not 40 Z85 characters, is an error naming it. */
int kl_net_read_key(const char *path, char out[41], char *err);

/* Reads every DIR/\*.pub into *keys (*n Z85 strings, each and the array
 * to be freed with kl_net_keys_free); a file that is not a key is skipped
 * with a warning naming it. A missing DIR is KL_ERR_NOTFOUND, another
 * failure to read it KL_ERR_IO. */
int kl_net_read_key_dir(const char *dir, char ***keys, size_t *n, char *err);
void kl_net_keys_free(char **keys, size_t n);

typedef struct kl_net_s kl_net_t;

/* A ROUTER's view of a peer: its routing id, and (filled by kl_net_recv
 * on a CURVE server) the Z85 public key it authenticated with, "" without
 * CURVE. Peers are told apart by id and len only. */
typedef struct {
    uint8_t id[256];
    size_t len;
    char key[41];
} kl_peer_t;

typedef struct {
    uint64_t frames_in;
    uint64_t frames_out;
    uint64_t dropped_malformed; /* did not decode or failed bounds */
    uint64_t dropped_oversize;
    uint64_t dropped_version; /* other major version */
    uint64_t auth_denied;     /* server: clients its ZAP handler refused;
                                 client: times the server refused it */
} kl_net_stats_t;

/* Binds a ROUTER on endpoint (e.g. "tcp://0.0.0.0:7070" on every
 * interface, "tcp://127.0.0.1:*" on a free loopback port). */
int kl_net_server_new(kl_net_t **out, const char *endpoint,
                      const kl_net_security_t *sec, char *err);
/* Connects a DEALER to endpoint. ZeroMQ reconnects by itself when the
 * server goes away and comes back. A CURVE handshake the server refuses
 * (key not in its allow dir) is retried by kl_net itself, after 1 s and
 * then backing off to 30 s (libzmq alone would give up), inside
 * kl_net_send / kl_net_recv; meanwhile kl_net_send returns KL_ERR_AUTH. */
int kl_net_client_new(kl_net_t **out, const char *endpoint,
                      const kl_net_security_t *sec, char *err);
/* Closes the socket (linger 0); with the last CURVE server of the process
 * the ZAP thread stops, with the last kl_net_t the zmq context ends. NULLs
 * *self_p; safe on NULL. */
void kl_net_destroy(kl_net_t **self_p);

/* The zmq socket, for zmq_poll (borrowed). */
void *kl_net_socket(kl_net_t *self);
/* The endpoint actually bound (wildcard ports resolved), e.g.
 * "tcp://127.0.0.1:40123". Borrowed. */
const char *kl_net_endpoint(const kl_net_t *self);

/* Stamps the protocol version into env and sends it as one frame (ROUTER:
 * to peer; DEALER: peer is NULL). Does not block longer than a full send
 * queue allows (ZMQ_SNDTIMEO 1000 ms); KL_ERR_TIMEOUT then. The bounds of
 * kl_net_decode are checked first: an envelope the peer would drop is not
 * sent (KL_ERR_PROTO naming the field). ROUTER: a peer that is not
 * connected (any more) is KL_ERR_CLOSED at once. A CURVE client the
 * server refused: KL_ERR_AUTH until its next try. env stays the
 * caller's. */
int kl_net_send(kl_net_t *self, const kl_peer_t *peer, Kiln__Envelope *env,
                char *err);
/* kl_net_send that never waits: a full send queue is KL_ERR_TIMEOUT at
 * once and nothing is sent (a server that must not stall on one slow
 * peer keeps the message and tries again later). */
int kl_net_try_send(kl_net_t *self, const kl_peer_t *peer, Kiln__Envelope *env,
                    char *err);
/* Receives one envelope, waiting up to timeout_ms (0: do not wait, -1:
 * forever). Returns KL_OK and *env (free with kl_net_envelope_free), or
 * KL_ERR_TIMEOUT when nothing came. A frame that is malformed, oversize or
 * of another major version is dropped, counted, and reported as
 * KL_ERR_PROTO / KL_ERR_VERSION with a message (and, for VERSION, *env
 * still set so the caller can answer with a Goodbye naming both
 * versions; it then holds only version_major / version_minor, no body).
 * A frame without a version (major 0) is malformed, not foreign.
 * A ROUTER frame set is [routing id][envelope] and a DEALER one is
 * [envelope]; any other number of frames is dropped (KL_ERR_PROTO).
 * peer (optional) receives the sender's routing id on a ROUTER, and the
 * public key it authenticated with on a CURVE server. */
int kl_net_recv(kl_net_t *self, kl_peer_t *peer, Kiln__Envelope **env,
                int timeout_ms, char *err);
void kl_net_stats(const kl_net_t *self, kl_net_stats_t *out);

/* The codec alone (used by kl_net_recv and the fuzz target): unpacks len
 * bytes and checks every bound above. Repeated fields are counted on the
 * wire before anything is allocated. Beyond the counts: a body must be
 * set; strings within KL_NET_MAX_STRING (sources and trace bytes
 * KL_NET_MAX_SOURCE, result.error and goodbye.reason KL_NET_MAX_ERROR);
 * request.workload_key empty or exactly 16 bytes; request.evaluator (may
 * be absent: the agent's defaults) repeat <= KL_NET_MAX_SAMPLES, rtol and
 * atol finite and >= 0;
 * candidate grid and block 0 or 3 values; shape dimensions >= 0 without
 * overflow of their product; enum values known; result samples finite and
 * >= 0; a sub-message at most once. On failure: KL_ERR_PROTO, *out NULL,
 * and a message naming the field ("request.candidates[3].grid: ..."). The
 * version is not checked here (kl_net_recv does). */
int kl_net_decode(const void *buf, size_t len, Kiln__Envelope **out, char *err);
/* Packs env into a fresh heap buffer (*len bytes); free() it. */
void *kl_net_encode(Kiln__Envelope *env, size_t *len);
void kl_net_envelope_free(Kiln__Envelope **env_p);

/* True for endpoints that stay on this machine. */
bool kl_net_is_loopback(const char *endpoint);

#endif
