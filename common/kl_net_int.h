/* kl_net_int.h - internals shared by the files of common/net (kl_net.c,
 * kl_net_codec.c, kl_net_zap.c). Not part of the public contract. */
#ifndef KL_NET_INT_H
#define KL_NET_INT_H

#include <stdint.h>

#include "kl_net.h"

/* Checks every bound of an unpacked (or about to be packed) envelope.
 * Returns KL_OK or KL_ERR_PROTO with a message naming the field. */
int kl_net__check(const Kiln__Envelope *env, char *err);

/* Reads the version fields of an encoded Envelope without unpacking it
 * (absent fields read as 0). KL_ERR_PROTO when the top level does not
 * parse. */
int kl_net__peek_version(const void *buf, size_t len, uint32_t *major,
                         uint32_t *minor);

/* The process-wide zmq context: the first acquire creates it, the last
 * release terminates it (every socket must be closed by then). Returns
 * NULL with a message when the context cannot be created. */
void *kl_net__ctx_acquire(char *err);
void kl_net__ctx_release(void);

/* Registers a CURVE server's allow-list directory (and also_dir, may be
 * NULL or missing, whose keys are admitted too) with the process' ZAP
 * handler (started on the first registration) and writes the ZAP domain
 * the server socket must carry into domain (32 bytes). The directories
 * are scanned once now; a missing allow_dir is KL_ERR_NOTFOUND. */
int kl_net__zap_register(const char *allow_dir, const char *also_dir,
                         char domain[32], char *err);
/* Forgets the domain; the handler stops with the last one. */
void kl_net__zap_unregister(const char *domain);
/* Clients refused so far for this domain. */
uint64_t kl_net__zap_denied(const char *domain);

#endif
