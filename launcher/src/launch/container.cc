// container.cc: runtime choice and command lines for gpurun --container (container.h).
#include "gpurun/launcher/container.h"

#include <fmt/format.h>

#include "gpurun/launcher/allocation.h"
#include "gpurun/launcher/error.h"

namespace gpurun::launcher {

const char* to_string(ContainerRuntime r) {
  switch (r) {
    case ContainerRuntime::apptainer:
      return "apptainer";
    case ContainerRuntime::podman:
      return "podman";
    case ContainerRuntime::pyxis:
      return "pyxis";
  }
  return "?";
}

ContainerRuntime pick_container_runtime(
    const std::string& name, bool srun_pyxis,
    const std::function<std::optional<std::string>(const std::string&)>& find_tool) {
  if (name == "apptainer") return ContainerRuntime::apptainer;
  if (name == "podman") return ContainerRuntime::podman;
  if (name == "pyxis") return ContainerRuntime::pyxis;
  if (name != "auto")
    throw Error(
        fmt::format("--container-runtime '{}': expected auto, apptainer, podman or pyxis", name));
  if (srun_pyxis) return ContainerRuntime::pyxis;
  for (auto r : {ContainerRuntime::apptainer, ContainerRuntime::podman})
    if (find_tool && find_tool(to_string(r))) return r;
  throw Error(
      "--container: no container runtime found: looked for apptainer and podman on PATH, and "
      "for an srun with pyxis (--container-image) under Slurm; install one, or name it with "
      "--container-runtime");
}

namespace {

std::vector<std::string> podman_argv(const ContainerSpec& c, const ContainerRank& r) {
  std::vector<std::string> v{"podman", "run", "--rm", "--network=host", "--ipc=host"};
  for (const auto& [k, val] : r.env) {
    if (k != "CUDA_VISIBLE_DEVICES") continue;
    // Only the rank's GPUs exist in the container, numbered from 0 there.
    for (const auto& id : parse_gpu_list(val)) v.push_back("--device=nvidia.com/gpu=" + id);
  }
  for (const auto& [k, val] : r.env) {
    std::string value = val;
    if (k == "CUDA_VISIBLE_DEVICES") {
      auto n = parse_gpu_list(val).size();
      value.clear();
      for (std::size_t i = 0; i < n; ++i) value += (i ? "," : "") + std::to_string(i);
    }
    v.push_back(fmt::format("--env={}={}", k, value));
  }
  for (const auto& b : r.binds) v.push_back(fmt::format("--volume={}:{}", b, b));
  v.push_back(fmt::format("--volume={}:{}", r.workdir, r.workdir));
  v.push_back("--workdir=" + r.workdir);
  v.push_back(c.image);
  return v;
}

// Apptainer reads --env as CSV (a map flag: `--env A=1,B=2`): a value with a comma (TF_CONFIG,
// CUDA_VISIBLE_DEVICES=0,1) was cut there, and one with a quote refused ("bare \" in
// non-quoted-field", apptainer/apptainer#1152). Such a KEY=VALUE goes as one quoted CSV field.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

std::vector<std::string> apptainer_argv(const ContainerSpec& c, const ContainerRank& r) {
  // --nv binds the node's GPUs and driver; the home and working folders are mounted by default.
  std::vector<std::string> v{"apptainer", "exec", "--nv"};
  for (const auto& [k, val] : r.env) v.push_back("--env=" + csv_field(k + "=" + val));
  for (const auto& b : r.binds) v.push_back("--bind=" + b);
  v.push_back("--pwd=" + r.workdir);
  v.push_back(c.image);
  return v;
}

}  // namespace

std::vector<std::string> container_argv(const ContainerSpec& c, const ContainerRank& r,
                                        const std::vector<std::string>& program) {
  if (c.runtime == ContainerRuntime::pyxis)
    throw Error("pyxis runs the whole srun task in the image: no per-rank container command");
  std::vector<std::string> v =
      c.runtime == ContainerRuntime::podman ? podman_argv(c, r) : apptainer_argv(c, r);
  v.insert(v.end(), program.begin(), program.end());
  return v;
}

std::vector<std::string> pyxis_srun_flags(const std::string& image, const std::string& workdir) {
  return {"--container-image=" + image, fmt::format("--container-mounts={}:{}", workdir, workdir),
          "--container-workdir=" + workdir};
}

bool passed_into_container(const std::string& key) {
  // OMPI_/PMIX_/PMI_: an MPI program in the image joins the host's mpirun/srun (same MPI in the
  // image, host network and IPC), not a world of its own.
  for (const char* p : {"GPURUN_", "NCCL_", "OMPI_", "PMIX_", "PMI_"})
    if (key.rfind(p, 0) == 0) return true;
  return false;
}

}  // namespace gpurun::launcher
