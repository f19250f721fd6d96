package skiff.conformance;

import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.remoting.RPCHook;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;

/**
 * With CONFORMANCE_WIRE_LOG=1, every client of a scenario logs each request it sends and each
 * response it gets (code, remark, header fields, body length) to stderr: the commands as they
 * cross the wire, for diagnosing a difference between brokers.
 */
final class WireLog implements RPCHook {
    static final boolean ON = "1".equals(System.getenv("CONFORMANCE_WIRE_LOG"));
    private final String scenario;

    private WireLog(String scenario) {
        this.scenario = scenario;
    }

    static RPCHook forScenario(String scenario) {
        return ON ? new WireLog(scenario) : null;
    }

    @Override
    public void doBeforeRequest(String remoteAddr, RemotingCommand request) {
        try {
            request.makeCustomHeaderToNet(); // header fields into extFields, as encode() does
        } catch (RuntimeException e) {
            // the header stays unprinted; the request is sent as usual
        }
        print("->", remoteAddr, request);
    }

    @Override
    public void doAfterResponse(String remoteAddr, RemotingCommand request, RemotingCommand response) {
        if (response != null) {
            print("<-", remoteAddr, response);
        }
    }

    private void print(String dir, String addr, RemotingCommand c) {
        Map<String, String> ext = c.getExtFields() == null ? new TreeMap<>() : new TreeMap<>(c.getExtFields());
        String line = String.format("WIRE %s %s %s code=%d flag=%d opaque=%d%s ext=%s body=%d", scenario, dir, addr,
            c.getCode(), c.getFlag(), c.getOpaque(), c.getRemark() == null ? "" : " remark=" + c.getRemark(),
            ext, c.getBody() == null ? 0 : c.getBody().length);
        System.err.println(line.replace("\u0001", "\\1").replace("\u0002", "\\2"));
    }
}
