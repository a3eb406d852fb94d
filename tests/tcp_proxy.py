"""A TCP proxy in the test process, between the service and its database, that can cut the
database off the way networks and servers fail:

- `refuse()`: the database is down: the port refuses connections, open ones are closed;
- `blackhole()`: a partition: connections are accepted and open ones kept, but nothing is
  forwarded either way and nothing answers (the kernel still acknowledges the bytes, so
  only the client's own timeouts can notice);
- `restore()`: forward again (connections opened before stay dead, as after a partition).
"""

from __future__ import annotations

import selectors
import socket
import threading


class TcpProxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.mode = "forward"
        self._lock = threading.Lock()
        self._connections: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self._stopped = threading.Event()
        self.port = self._listen(0)

    # -- the faults --------------------------------------------------------------------------

    def refuse(self) -> None:
        with self._lock:
            self.mode = "refuse"
            self._close_connections()
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()

    def blackhole(self) -> None:
        with self._lock:
            self.mode = "blackhole"

    def restore(self) -> None:
        with self._lock:
            self._close_connections()
            self.mode = "forward"
            if self._listener is None:
                self._listen(self.port)

    def close(self) -> None:
        self._stopped.set()
        self.refuse()

    # -- the plumbing ------------------------------------------------------------------------

    def _listen(self, port: int) -> int:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return listener.getsockname()[1]

    def _accept(self, listener: socket.socket) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed: refusing
            with self._lock:
                self._connections.append(client)
                if self.mode != "forward":
                    continue  # accepted, and never answered
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._connections.append(server)
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        selector = selectors.DefaultSelector()
        selector.register(client, selectors.EVENT_READ, server)
        selector.register(server, selectors.EVENT_READ, client)
        try:
            while not self._stopped.is_set():
                if self.mode == "blackhole":
                    self._stopped.wait(0.05)  # hold everything: read nothing, send nothing
                    continue
                for key, _ in selector.select(timeout=0.05):
                    data = key.fileobj.recv(65536)
                    if not data or self.mode == "refuse":
                        return
                    if self.mode == "forward":
                        key.data.sendall(data)
                    # else a partition began while this was in flight: it is lost
        except OSError:
            return
        finally:
            selector.close()
            client.close()
            server.close()

    def _close_connections(self) -> None:
        for conn in self._connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
        self._connections = []
