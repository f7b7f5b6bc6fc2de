// consumer.cc: links the installed gpurun_launcher and expands a hostlist.
#include <cstdio>

#include "gpurun/launcher/hostlist.h"

int main() {
  auto hosts = gpurun::launcher::expand_hostlist("node[01-16]");
  std::printf("%zu %s\n", hosts.size(), gpurun::launcher::compress_hostlist(hosts).c_str());
  return hosts.size() == 16 ? 0 : 1;
}
