// DirectBuffers: four threads allocate 1.6 M direct byte buffers of 1 B to 50 KB (the JVM
// mallocs each one and zeroes it); the JVM's cleaner frees them after each collection, from a
// thread of its own. With the heap at 512 MiB (and so the direct memory), the process churns
// near its peak: what a server on direct buffers (network, file I/O) does all day.
// Run as `java -Xmx512m DirectBuffers.java`; prints a checksum of the sizes allocated.
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

public class DirectBuffers {
    public static void main(String[] args) throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(4);
        List<Future<Long>> tasks = new ArrayList<>();
        for (int t = 0; t < 8; t++) {
            final int task = t;
            tasks.add(pool.submit(() -> {
                long sum = 0;
                for (int i = 0; i < 200_000; i++) {
                    ByteBuffer buffer = ByteBuffer.allocateDirect(1 + (i * 7919 + task) % 50_000);
                    buffer.put(buffer.capacity() - 1, (byte) i);
                    sum += buffer.capacity() + buffer.get(buffer.capacity() - 1);
                }
                return sum;
            }));
        }
        long sum = 0;
        for (Future<Long> task : tasks) sum += task.get();
        pool.shutdown();
        System.out.println("directbuffers sum=" + sum);
    }
}
