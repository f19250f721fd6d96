package skiff.conformance.grpc;

import apache.rocketmq.v2.Address;
import apache.rocketmq.v2.MessagingServiceGrpc;
import java.io.ByteArrayInputStream;
import java.io.InputStream;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.shaded.com.google.protobuf.Descriptors.FieldDescriptor;
import org.apache.rocketmq.shaded.com.google.protobuf.Message;
import org.apache.rocketmq.shaded.com.google.protobuf.TextFormat;
import org.apache.rocketmq.shaded.grpc.netty.NettyChannelBuilder;
import org.apache.rocketmq.shaded.grpc.netty.NettyServerBuilder;
import org.apache.rocketmq.shaded.io.grpc.CallOptions;
import org.apache.rocketmq.shaded.io.grpc.ClientCall;
import org.apache.rocketmq.shaded.io.grpc.Context;
import org.apache.rocketmq.shaded.io.grpc.Deadline;
import org.apache.rocketmq.shaded.io.grpc.HandlerRegistry;
import org.apache.rocketmq.shaded.io.grpc.ManagedChannel;
import org.apache.rocketmq.shaded.io.grpc.Metadata;
import org.apache.rocketmq.shaded.io.grpc.MethodDescriptor;
import org.apache.rocketmq.shaded.io.grpc.Server;
import org.apache.rocketmq.shaded.io.grpc.ServerCall;
import org.apache.rocketmq.shaded.io.grpc.ServerCallHandler;
import org.apache.rocketmq.shaded.io.grpc.ServerMethodDefinition;
import org.apache.rocketmq.shaded.io.grpc.Status;

/**
 * A plaintext gRPC relay that logs every call between the Java client and the server under test
 * (--wire-log FILE): method, request metadata, each message both ways as protobuf text, the
 * closing status and trailers. Endpoints in the server's answers (QueryRoute, QueryAssignment,
 * ...) that name the upstream port are rewritten to the relay's, so the client keeps talking
 * through it. Built on the gRPC and protobuf classes shaded into rocketmq-client-java.
 *
 * <p>{@link #cutOff()} makes the client's network go silent without closing anything: from then
 * on nothing passes either way (new calls fail at the relay with UNAVAILABLE, messages and
 * cancels of open calls are dropped), so the server never hears that the client left, as when
 * its process hangs or its host drops off the network.
 */
final class WireRelay implements AutoCloseable {
    private final String upstreamHost;
    private final int upstreamPort;
    private final PrintStream log;
    private final ManagedChannel channel;
    private final Server server;
    private final AtomicLong calls = new AtomicLong();
    private final long t0 = System.currentTimeMillis();
    private final Map<String, MethodDescriptor<?, ?>> methods = new HashMap<>();
    private volatile boolean cut;

    /** A relay to {@code upstream}; {@code log} null logs nothing. */
    WireRelay(String upstream, PrintStream log) throws Exception {
        int colon = upstream.lastIndexOf(':');
        this.upstreamHost = upstream.substring(0, colon);
        this.upstreamPort = Integer.parseInt(upstream.substring(colon + 1));
        this.log = log;
        for (var m : MessagingServiceGrpc.getServiceDescriptor().getMethods()) {
            methods.put(m.getFullMethodName(), m);
        }
        channel = NettyChannelBuilder.forAddress(upstreamHost, upstreamPort).usePlaintext()
            .maxInboundMessageSize(130 * 1024 * 1024).build();
        server = NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0))
            .maxInboundMessageSize(130 * 1024 * 1024)
            .fallbackHandlerRegistry(new HandlerRegistry() {
                @Override
                public ServerMethodDefinition<?, ?> lookupMethod(String name, String authority) {
                    MethodDescriptor<byte[], byte[]> md = MethodDescriptor.<byte[], byte[]>newBuilder()
                        .setType(MethodDescriptor.MethodType.UNKNOWN)
                        .setFullMethodName(name)
                        .setRequestMarshaller(BYTES)
                        .setResponseMarshaller(BYTES)
                        .build();
                    return ServerMethodDefinition.create(md, new Handler());
                }
            })
            .build()
            .start();
    }

    String endpoint() {
        return "127.0.0.1:" + server.getPort();
    }

    /** Nothing passes from now on, and nothing is closed or cancelled upstream. */
    void cutOff() {
        cut = true;
    }

    @Override
    public void close() throws Exception {
        server.shutdownNow();
        channel.shutdownNow();
        channel.awaitTermination(5, TimeUnit.SECONDS);
    }

    private static final MethodDescriptor.Marshaller<byte[]> BYTES = new MethodDescriptor.Marshaller<>() {
        @Override
        public InputStream stream(byte[] value) {
            return new ByteArrayInputStream(value);
        }

        @Override
        public byte[] parse(InputStream stream) {
            try {
                return stream.readAllBytes();
            } catch (java.io.IOException e) {
                throw new RuntimeException(e);
            }
        }
    };

    private void line(long id, String dir, String method, String what) {
        if (log == null) {
            return;
        }
        synchronized (log) {
            log.printf("WIRE +%06d #%d %s %s %s%n", System.currentTimeMillis() - t0, id, dir, method, what);
            log.flush();
        }
    }

    private static String shortName(String full) {
        return full.substring(full.lastIndexOf('/') + 1);
    }

    private static String headers(Metadata h) {
        List<String> out = new ArrayList<>();
        for (String k : h.keys()) {
            if (k.endsWith("-bin")) {
                continue;
            }
            out.add(k + "=" + h.get(Metadata.Key.of(k, Metadata.ASCII_STRING_MARSHALLER)));
        }
        return out.toString();
    }

    /** The message as one line of protobuf text (bodies cut short), or its size. */
    private String decode(String method, byte[] bytes, boolean request) {
        MethodDescriptor<?, ?> md = methods.get(method);
        try {
            Message proto = parse(md, bytes, request);
            if (proto == null) {
                return bytes.length + " bytes";
            }
            String s = TextFormat.shortDebugString(proto);
            s = s.replaceAll("body: \"([^\"]{0,40})[^\"]*\"", "body: \"$1...\"");
            return s.length() > 3000 ? s.substring(0, 3000) + "..." : s;
        } catch (Exception e) {
            return bytes.length + " bytes (" + e + ")";
        }
    }

    private static Message parse(MethodDescriptor<?, ?> md, byte[] bytes, boolean request) throws Exception {
        if (md == null) {
            return null;
        }
        Object m = request ? md.getRequestMarshaller() : md.getResponseMarshaller();
        if (!(m instanceof MethodDescriptor.PrototypeMarshaller)) {
            return null;
        }
        Message proto = (Message) ((MethodDescriptor.PrototypeMarshaller<?>) m).getMessagePrototype();
        return proto.getParserForType().parseFrom(bytes);
    }

    /** Answers naming the upstream port name the relay's instead. */
    private byte[] rewrite(String method, byte[] bytes) {
        try {
            Message proto = parse(methods.get(method), bytes, false);
            if (proto == null) {
                return bytes;
            }
            Message out = rewrite(proto);
            return out == proto ? bytes : out.toByteArray();
        } catch (Exception e) {
            return bytes;
        }
    }

    private Message rewrite(Message m) {
        if (m instanceof Address) {
            Address a = (Address) m;
            return a.getPort() == upstreamPort ? a.toBuilder().setPort(server.getPort()).build() : a;
        }
        Message.Builder b = null;
        for (Map.Entry<FieldDescriptor, Object> e : m.getAllFields().entrySet()) {
            FieldDescriptor fd = e.getKey();
            if (fd.getJavaType() != FieldDescriptor.JavaType.MESSAGE) {
                continue;
            }
            if (fd.isRepeated()) {
                List<Object> out = new ArrayList<>();
                boolean changed = false;
                for (Object o : (List<?>) e.getValue()) {
                    Message r = rewrite((Message) o);
                    changed |= r != o;
                    out.add(r);
                }
                if (changed) {
                    b = b == null ? m.toBuilder() : b;
                    b.setField(fd, out);
                }
            } else {
                Message r = rewrite((Message) e.getValue());
                if (r != e.getValue()) {
                    b = b == null ? m.toBuilder() : b;
                    b.setField(fd, r);
                }
            }
        }
        return b == null ? m : b.build();
    }

    private final class Handler implements ServerCallHandler<byte[], byte[]> {
        @Override
        public ServerCall.Listener<byte[]> startCall(ServerCall<byte[], byte[]> serverCall, Metadata headers) {
            long id = calls.incrementAndGet();
            String method = serverCall.getMethodDescriptor().getFullMethodName();
            String name = shortName(method);
            if (cut) {
                serverCall.close(Status.UNAVAILABLE.withDescription("the relay is cut off"), new Metadata());
                return new ServerCall.Listener<>() {};
            }
            line(id, "->", name, "headers " + headers(headers));
            MethodDescriptor<byte[], byte[]> md = serverCall.getMethodDescriptor();
            // The client's deadline (grpc-timeout) goes on: the server sizes long polls by it.
            CallOptions options = CallOptions.DEFAULT;
            Deadline deadline = Context.current().getDeadline();
            if (deadline != null) {
                options = options.withDeadline(deadline);
            }
            ClientCall<byte[], byte[]> clientCall = channel.newCall(md, options);
            clientCall.start(new ClientCall.Listener<>() {
                @Override
                public void onHeaders(Metadata h) {
                    synchronized (serverCall) {
                        serverCall.sendHeaders(h);
                    }
                }

                @Override
                public void onMessage(byte[] message) {
                    if (cut) {
                        return;
                    }
                    line(id, "<-", name, decode(method, message, false));
                    byte[] out = rewrite(method, message);
                    synchronized (serverCall) {
                        serverCall.sendMessage(out);
                    }
                    synchronized (clientCall) {
                        clientCall.request(1);
                    }
                }

                @Override
                public void onClose(Status status, Metadata trailers) {
                    if (cut) {
                        return;
                    }
                    line(id, "<-", name, "close " + status.getCode()
                        + (status.getDescription() == null ? "" : " " + status.getDescription())
                        + " trailers " + headers(trailers));
                    synchronized (serverCall) {
                        serverCall.close(status, trailers);
                    }
                }
            }, headers);
            synchronized (clientCall) {
                clientCall.request(1);
            }
            synchronized (serverCall) {
                serverCall.request(1);
            }
            return new ServerCall.Listener<>() {
                @Override
                public void onMessage(byte[] message) {
                    if (cut) {
                        return;
                    }
                    line(id, "->", name, decode(method, message, true));
                    synchronized (clientCall) {
                        clientCall.sendMessage(message);
                    }
                    synchronized (serverCall) {
                        serverCall.request(1);
                    }
                }

                @Override
                public void onHalfClose() {
                    if (cut) {
                        return;
                    }
                    line(id, "->", name, "half-close");
                    synchronized (clientCall) {
                        clientCall.halfClose();
                    }
                }

                @Override
                public void onCancel() {
                    if (cut) {
                        return;
                    }
                    line(id, "->", name, "cancel");
                    synchronized (clientCall) {
                        clientCall.cancel("client cancelled", null);
                    }
                }
            };
        }
    }
}
