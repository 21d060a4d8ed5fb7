// jvm_aes_gcm.java — AES-128-GCM encryption in one JVM thread, the cipher of a
// Kafka TLS listener, four rounds of 3 s. Run with the JVM flags to compare:
//   java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC tests/bench/jvm_aes_gcm.java
//   java tests/bench/jvm_aes_gcm.java
// (the test stack's lean broker JVM against the JVM's defaults; docs/performance.md).
import java.nio.ByteBuffer;
import javax.crypto.Cipher;
import javax.crypto.SecretKey;
import javax.crypto.spec.GCMParameterSpec;
import javax.crypto.spec.SecretKeySpec;

public class jvm_aes_gcm {
    public static void main(String[] args) throws Exception {
        SecretKey key = new SecretKeySpec(new byte[16], "AES");
        byte[] in = new byte[16384], out = new byte[16384 + 16];
        Cipher c = Cipher.getInstance("AES/GCM/NoPadding");
        long iv = 0;
        for (int round = 1; round <= 4; round++) {
            long t0 = System.nanoTime(), bytes = 0;
            while (System.nanoTime() - t0 < 3_000_000_000L) {
                byte[] nonce = new byte[12];
                ByteBuffer.wrap(nonce).putLong(iv++);
                c.init(Cipher.ENCRYPT_MODE, key, new GCMParameterSpec(128, nonce));
                bytes += c.doFinal(in, 0, in.length, out, 0) - 16;
            }
            System.out.printf("round %d: %.0f MB/s%n", round,
                              bytes / 1e6 / ((System.nanoTime() - t0) / 1e9));
        }
    }
}
