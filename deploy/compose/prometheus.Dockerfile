# Prometheus from Debian's archive: the same version that checks reckon's
# dashboards and alerts (promtool, in the tests), and buildable where no
# registry but Debian's is reachable.
ARG BASE=docker.io/library/debian:bookworm
FROM ${BASE}
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus \
 && rm -rf /var/lib/apt/lists/* \
 && install -d -o prometheus -g prometheus /prometheus
USER prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
