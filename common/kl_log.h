/* kl_log.h - leveled logging to stderr. The macro tests the level before
 * any formatting is done. Library code logs here and never prints to
 * stdout. */
#ifndef KL_LOG_H
#define KL_LOG_H

typedef enum {
    KL_LOG_ERROR = 0,
    KL_LOG_WARN = 1,
    KL_LOG_INFO = 2,
    KL_LOG_DEBUG = 3,
} kl_log_level;

extern int kl_log_level_current;

/* Sets the level; also read once from KILN_LOG (error|warn|info|debug) by
 * kl_log_init(). The tag names the process in every line ("agent",
 * "coordinator"). */
void kl_log_init(const char *tag);
void kl_log_set_level(int level);
void kl_log_write(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define kl_log(level, ...)                                                     \
    do {                                                                       \
        if ((level) <= kl_log_level_current)                                   \
            kl_log_write((level), __VA_ARGS__);                                \
    } while (0)
#define kl_error(...) kl_log(KL_LOG_ERROR, __VA_ARGS__)
#define kl_warn(...) kl_log(KL_LOG_WARN, __VA_ARGS__)
#define kl_info(...) kl_log(KL_LOG_INFO, __VA_ARGS__)
#define kl_debug(...) kl_log(KL_LOG_DEBUG, __VA_ARGS__)

#endif
