// moezip: the config's `model` key, checked against the filesystem once the file is loaded (the
// loader itself reads no other file, so moezip-worker and the tools can read a coordinator's config).
#include "coordinator/config/config_internal.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace moezip {

Status config_check_model_file(const Config & cfg) {
    if (cfg.model.empty()) return Status::ok();
    const std::string where = cfg.source + ":" + std::to_string(config_line_of(cfg, "model", 1)) + ": model: " +
                              config_quote(cfg.model);
    const int fd = open(cfg.model.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::invalid_argument(where + ": " + strerror(errno) + " (the GGUF file this host distributes)");
    struct stat st;
    char magic[4] = {0, 0, 0, 0};
    const bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    const bool gguf = regular && pread(fd, magic, sizeof magic, 0) == (ssize_t) sizeof magic && memcmp(magic, "GGUF", 4) == 0;
    close(fd);
    if (!regular) return Status::invalid_argument(where + ": not a regular file (the GGUF file this host distributes)");
    if (!gguf) return Status::invalid_argument(where + ": not a GGUF file (no \"GGUF\" magic at its start)");
    return Status::ok();
}

} // namespace moezip
