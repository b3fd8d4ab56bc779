# tests/deploy/: the deployment files (deploy/) checked without Docker,
# Kubernetes or a running systemd.
TEST_SCRIPTS += tests/deploy/container_test.sh tests/deploy/systemd_test.sh
TEST_SCRIPTS += tests/deploy/kubernetes_test.sh
