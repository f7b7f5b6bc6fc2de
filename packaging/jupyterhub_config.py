# jupyterhub_config.py: JupyterHub for a lab or club on one gpuq machine (launcher/queue/README.md,
# "Jupyter for a lab or club"). Users log in with their Unix password (PAM) and each one's
# Jupyter server runs as a gpuq job of theirs, queued like any other job.
#   sudo jupyterhub -f /usr/share/gpurun/jupyterhub_config.py    (as root: PAM, and runuser)
# Copy it to /etc/jupyterhub/ to change it; every line below is a plain JupyterHub setting.
c = get_config()  # noqa: F821 (JupyterHub provides get_config)

# Log in with the machine's Unix accounts (JupyterHub's default PAMAuthenticator, through
# python3-pamela). Sessions are not opened: the server runs under gpuq, not under the hub.
c.JupyterHub.authenticator_class = "jupyterhub.auth.PAMAuthenticator"
c.PAMAuthenticator.open_sessions = False
# Who may log in: every Unix user by default; a lab usually names its members, or a group:
# c.Authenticator.allowed_users = {"alice", "bob"}
# c.PAMAuthenticator.allowed_groups = {"gpu"}

# Each server is a gpuq job (gpuq_spawner, installed with gpurun).
c.JupyterHub.spawner_class = "gpuq_spawner.GpuqSpawner"
# c.GpuqSpawner.max_gpus = 2           # the most GPUs one server may ask for (default 8)
# c.GpuqSpawner.default_time = "4:00:00"
# c.GpuqSpawner.max_hours = 12         # the longest time limit on the form (default 24)
# c.GpuqSpawner.socket = "/run/gpuq.sock"

# Only this machine can reach the hub and the proxy. To serve the lab's network, put a TLS
# reverse proxy (nginx, Caddy) in front, or set c.JupyterHub.ip and configure
# c.JupyterHub.ssl_cert / ssl_key: passwords must not cross a network in clear text.
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = 8000
c.JupyterHub.hub_ip = "127.0.0.1"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:8001"

# The hub's own files (its database and cookie secret) in one root-only place.
c.JupyterHub.db_url = "sqlite:////var/lib/jupyterhub/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "/var/lib/jupyterhub/jupyterhub_cookie_secret"
