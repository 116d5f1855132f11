"""The ``vagrant`` and ``hosts`` backends: node daemons past one network namespace.

Nodes run in Vagrant guests on this machine (``vagrant-lxc`` system containers or
``vagrant-libvirt`` VMs) or on several hosts reached over SSH, each node in its own network
namespace on its guest or host; the orchestrator reaches every node daemon over ZeroMQ TCP
with CURVE (``nodes/daemon/control.py``). Modules, one job each:

* ``boxes``: the debootstrap root and the two boxes built from it (``vagrant/build-box``);
* ``placement``: ``hosts:`` and the placement of nodes on hosts or guests (pure);
* ``vxlan``: VNIs per segment and the unicast FDB of every host (pure);
* ``vagrantfile``: the Vagrantfile of one testbed, generated from its plan (pure);
* ``curve``: the testbed's CURVE keys (one pair per node daemon, one for the orchestrator);
* ``shell``: running argv lists on a host: here, over SSH, bounded;
* ``agent``: what runs *on* each host (namespaces, interfaces, daemons, links, events);
* ``services``: libvirtd/virtlogd started by hand and stopped by PID (no systemd here);
* ``supervisor`` / ``client``: the per-testbed process and its client handles;
* ``clean``: what ``testbed clean`` knows of these resources.
"""
