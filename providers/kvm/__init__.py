"""The kvm provider: egress proxies as libvirt VMs on the operator's own
hypervisors, reached over SSH (paramiko) with libvirt-python's RPC bridged
over the SSH connection. See docs/kvm-provider.md."""
