// placeholder until the hostlist parser lands
