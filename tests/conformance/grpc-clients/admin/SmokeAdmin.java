import java.util.HashMap;
import java.util.Map;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.remoting.protocol.body.ClusterInfo;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Topic and group set-up for the gRPC client smokes, over RocketMQ remoting as mqadmin does it
 * (rocketmq-tools' DefaultMQAdminExt through the name server): the gRPC protocol has no call that
 * creates either. Same calls as tests/conformance/grpc/.../Admin.java.
 *
 *   java -cp TOOLS_CP:CLASSES SmokeAdmin NAMESRV topic=NAME[:TYPE[:QUEUES]] ... group=NAME[:LITE_PARENT] ...
 *
 * A topic gets QUEUES (default 4) read and write queues and the attribute +message.type=TYPE
 * (default NORMAL)
 * (UPDATE_AND_CREATE_TOPIC, 17); a group is created with UPDATE_AND_CREATE_SUBSCRIPTIONGROUP
 * (200), bound to the LITE topic LITE_PARENT when one is named (+lite.bind.topic, shared). Then it waits until the name server routes every topic. Prints "OK" and exits 0.
 */
public final class SmokeAdmin {
    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: SmokeAdmin NAMESRV topic=NAME[:TYPE[:QUEUES]] ... group=NAME[:LITE_PARENT] ...");
            System.exit(2);
        }
        String id = "smoke_admin_" + System.nanoTime();
        DefaultMQAdminExt ext = new DefaultMQAdminExt(id, 10_000);
        ext.setNamesrvAddr(args[0]);
        ext.setInstanceName(id);
        ext.start();
        try {
            String broker = null;
            ClusterInfo ci = ext.examineBrokerClusterInfo();
            for (BrokerData bd : ci.getBrokerAddrTable().values()) {
                if (bd.getBrokerAddrs().get(0L) != null) {
                    broker = bd.getBrokerAddrs().get(0L);
                    break;
                }
            }
            if (broker == null) {
                throw new IllegalStateException("no master broker in " + ci.getBrokerAddrTable());
            }
            java.util.List<String> topics = new java.util.ArrayList<>();
            for (int i = 1; i < args.length; i++) {
                String a = args[i];
                if (a.startsWith("topic=")) {
                    String[] nt = a.substring(6).split(":", 3);
                    int queues = nt.length > 2 ? Integer.parseInt(nt[2]) : 4;
                    TopicConfig tc = new TopicConfig(nt[0], queues, queues, 6);
                    Map<String, String> attrs = new HashMap<>();
                    attrs.put("+message.type", nt.length > 1 ? nt[1] : "NORMAL");
                    tc.setAttributes(attrs);
                    ext.createAndUpdateTopicConfig(broker, tc);
                    topics.add(nt[0]);
                    System.err.println("created topic " + nt[0] + " on " + broker);
                } else if (a.startsWith("group=")) {
                    String[] ng = a.substring(6).split(":", 2);
                    SubscriptionGroupConfig g = new SubscriptionGroupConfig();
                    g.setGroupName(ng[0]);
                    if (ng.length > 1) {
                        Map<String, String> attrs = new HashMap<>();
                        attrs.put("+lite.bind.topic", ng[1]);
                        attrs.put("+lite.sub.model", "Shared");
                        g.setAttributes(attrs);
                    }
                    ext.createAndUpdateSubscriptionGroupConfig(broker, g);
                    System.err.println("created group " + g.getGroupName() + " on " + broker);
                } else {
                    throw new IllegalArgumentException("not topic=... or group=...: " + a);
                }
            }
            long deadline = System.currentTimeMillis() + 15_000;
            for (String t : topics) {
                while (true) {
                    try {
                        if (!ext.examineTopicRouteInfo(t).getQueueDatas().isEmpty()) {
                            break;
                        }
                    } catch (Exception e) {
                        if (System.currentTimeMillis() > deadline) {
                            throw new IllegalStateException("topic " + t + " not routed 15 s after creation", e);
                        }
                    }
                    Thread.sleep(200);
                }
            }
            System.out.println("OK");
        } finally {
            ext.shutdown();
        }
    }
}
